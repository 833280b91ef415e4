"""The names trib gives the data files it writes.

The writer makes them; the read side (which files are trib's own) and ``clean``
(which files it may ever delete) recognise them. The pattern lives here, not in
the writer, so that reading a table never imports the writer (nor
pyarrow.compute): ``trib files`` starts many times an hour.
"""

from __future__ import annotations

import re

#: Names trib's writers produce; only these are ever deleted by ``clean``.
WRITTEN_NAME = re.compile(r"^(\.)?(part|dl)-\d{14}-[0-9a-f]{8}-\d{6}\.[A-Za-z0-9.]+?(\.inprogress)?$")
