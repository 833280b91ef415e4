"""A directory of rotating log files as a source, exactly once (``trib ingest --source-dir``).

Files are known by their content (:mod:`.identity`), their positions are kept in
the same commit as their records (:mod:`.positions`), a scan matches what the
directory holds now against those positions (:mod:`.scan`), and
:mod:`.ingest` reads, commits and acts on finished files.
"""
