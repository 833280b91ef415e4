-- Spark: re-measure the size without a job; a changed size drops the stale row count.
ANALYZE TABLE {table} PARTITION ({spec}) COMPUTE STATISTICS NOSCAN
