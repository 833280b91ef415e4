-- The usual hourly job, for comparison: "process the previous hour's partition". A file that lands
-- in an hour directory after this ran is never read (seed 002's whole argument).
-- Run: trib sql -f hourly_naive.sql --schedule-time T --var ods_table=... --var dw_table=... --var timezone=UTC
set hive.exec.dynamic.partition=true;
set hive.exec.dynamic.partition.mode=nonstrict;

INSERT INTO TABLE ${dw_table} PARTITION (dt)
SELECT
    event_time,
    user_id,
    action,
    payload,
    trib_file_mtime_ms(input_file_name())                              AS arrival_ms,
    trib_lateness_ms(trib_file_mtime_ms(input_file_name()), event_time) AS lateness_ms,
    trib_partition_value(event_time, 'yyyyMMddHH', '${timezone}')      AS dt
FROM ${ods_table}
WHERE dt = '${window_dt}';
