"""Everything JVM in trib (``tributary_read.hive_udfs`` once installed): the Java sources (``java/``),
their build with the JDK's javac (``build.py``), and the UDF jar's registry (``registry.py``).

No other module runs javac or names a ``.java`` file (tests/test_architecture.py keeps it so).
"""
