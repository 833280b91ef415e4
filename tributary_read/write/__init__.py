"""The write side: the manifest committer (``writer``) and line ingest with source offsets."""
