-- DW: events by the hour they happened in (dt = event hour), with when each one arrived.
-- Variables: ${dw_table}, ${dw_location}.
CREATE EXTERNAL TABLE IF NOT EXISTS ${dw_table} (
    event_time  BIGINT,
    user_id     STRING,
    action      STRING,
    payload     STRING,
    arrival_ms  BIGINT,
    lateness_ms BIGINT
)
PARTITIONED BY (dt STRING)
STORED AS PARQUET
LOCATION '${dw_location}';
