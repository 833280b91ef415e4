-- The hourly ETL, seed 002's way: read every ODS file that ARRIVED in the run's window, whatever
-- partition it landed in, and append its events to the DW partition of the hour they happened in.
-- Run: trib sql -f hourly_trib.sql --schedule-time T --var ods_table=... --var dw_table=... --var timezone=UTC
-- The window is closed ([start, end] in ms) and consecutive runs tile time: no file twice, none lost.
set dip.mapreduce.input.fileinputformat.sync=true;
set dip.mapreduce.input.fileinputformat.starttime=${window_start_ms};
set dip.mapreduce.input.fileinputformat.endtime=${window_end_ms};
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
FROM ${ods_table};
