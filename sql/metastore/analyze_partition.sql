-- Hive: recount numRows too, since Hive may answer count(*) from it.
ANALYZE TABLE {table} PARTITION ({spec}) COMPUTE STATISTICS
