"""Local services for development, tests and the demo (a Hive Metastore and the Spark Thrift Server).

Nothing in the library's core path imports this package.
"""
