"""SQL shipped with trib, installed as ``tributary_read.sql``: ``metastore/`` (the templates hive/sql.py
renders) and ``warehouse/`` (users' example scripts); see README.md here."""
