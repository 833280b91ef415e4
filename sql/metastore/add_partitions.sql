-- Mount many partitions in one statement: one metastore round trip per batch.
ALTER TABLE {table} ADD IF NOT EXISTS {items}
