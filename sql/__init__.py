"""SQL templates (``*.sql``), installed as ``tributary_read.sql``; see README.md here."""
