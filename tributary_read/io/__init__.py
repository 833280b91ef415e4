"""Storage and file formats: where bytes live and how they are laid out.

``storage`` holds the abstract :class:`~tributary_read.io.storage.Storage`
seam and the scheme registry; backends (local, S3, HDFS, memory) sit beside it.
"""
