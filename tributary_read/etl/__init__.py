"""The scheduled incremental ETL: ``trib etl run JOB.toml --schedule-time T``."""
