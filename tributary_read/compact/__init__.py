"""``trib compact``: small files merged into large ones, committed as one replace no reader counts twice.

:mod:`tributary_read.compact.plan` picks what to merge; :mod:`tributary_read.compact.run` rewrites
and commits it. What each reader sees across a compaction: docs/compaction.md.
"""
