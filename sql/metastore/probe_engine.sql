-- Two columns with a value on Spark Thrift Server; one 'is undefined' column on Hive.
SET spark.sql.catalogImplementation
