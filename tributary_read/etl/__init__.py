"""The scheduled incremental ETL: ``trib etl run JOB.toml --schedule-time T`` (docs/etl.md).

* :mod:`~tributary_read.etl.job`: the job file as frozen values (``Job.load``);
* :mod:`~tributary_read.etl.run`: one run's steps (``run_job``): resolve, read + SQL,
  commit once, sync Hive, ack;
* :mod:`~tributary_read.etl.report`: what a run did (``RunReport``, ``--json``);
* :mod:`~tributary_read.etl.lock`: one run of a job at a time;
* :mod:`~tributary_read.etl.submit` and :mod:`~tributary_read.etl.driver`: the
  ``spark-submit`` line for a cluster and the application it runs.

Nothing here imports pyspark until a run needs Spark.
"""
