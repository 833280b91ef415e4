"""Exact lag and freshness metrics for trib tables, their consumers and ETL jobs (issue 31; docs/observability.md).

Values come from the table's log and the consumers' own files, never from a directory listing or the
whole table state: a scrape reads a few small documents per table (see the probes).
"""
