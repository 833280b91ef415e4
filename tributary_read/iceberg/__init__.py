"""The Iceberg mirror: every trib commit of a table registered in an Iceberg table, exactly once (docs/iceberg.md).

Needs the ``iceberg`` extra (pyiceberg); :mod:`tributary_read.iceberg.deps` names it when missing.
"""
