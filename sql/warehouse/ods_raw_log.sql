-- ODS: the raw log as it lands, seed 002's aliyunXweibo table: one tab-separated line per event,
-- hour directories mounted as dt=yyyyMMddHH partitions (trib partitions sync).
-- Variables: ${ods_table}, ${ods_location}.
CREATE EXTERNAL TABLE IF NOT EXISTS ${ods_table} (
    event_time BIGINT,
    user_id    STRING,
    action     STRING,
    payload    STRING
)
PARTITIONED BY (dt STRING)
ROW FORMAT DELIMITED FIELDS TERMINATED BY '\t'
STORED AS TEXTFILE
LOCATION '${ods_location}';
