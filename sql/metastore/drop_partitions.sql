-- Unmount partitions; EXTERNAL tables keep their files.
ALTER TABLE {table} DROP IF EXISTS {items}
