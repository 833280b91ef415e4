-- DW: distinct users and events per event hour (dt = event hour), one row per hour.
-- Variables: ${dw_table}, ${dw_location}.
CREATE EXTERNAL TABLE IF NOT EXISTS ${dw_table} (
    users  BIGINT,
    events BIGINT
)
PARTITIONED BY (dt STRING)
STORED AS PARQUET
LOCATION '${dw_location}';
