-- The EXTERNAL table over a trib table's root (trib hive create-table); every part is checked and quoted.
CREATE EXTERNAL TABLE {table} ({columns})
PARTITIONED BY ({partitions})
{storage}
LOCATION {location}
TBLPROPERTIES ({properties})
