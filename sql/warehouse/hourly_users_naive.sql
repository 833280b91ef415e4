-- The usual hourly aggregate, for comparison: count(DISTINCT user) over "the previous hour's partition",
-- written once. A file that lands in that hour directory after this ran is never counted, and nothing
-- computes the hour again.
-- Run: trib sql -f hourly_users_naive.sql --schedule-time T --var ods_table=... --var dw_table=...
INSERT OVERWRITE TABLE ${dw_table} PARTITION (dt = '${window_dt}')
SELECT
    count(DISTINCT user_id) AS users,
    count(1)                AS events
FROM ${ods_table}
WHERE dt = '${window_dt}';
