"""The JVM side of trib (``tributary_read.hive_udfs`` once installed): Java sources for Hive UDFs and
the mtime-window path filter, compiled at first use against the installed pyspark wheel's jars."""
