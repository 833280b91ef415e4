-- Neither Hive nor Spark can relocate several partitions in one statement.
ALTER TABLE {table} PARTITION ({spec}) SET LOCATION {location}
