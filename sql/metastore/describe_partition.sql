-- The only SQL that reveals a partition's location (one partition per call).
DESCRIBE FORMATTED {table} PARTITION ({spec})
