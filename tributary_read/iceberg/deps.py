"""The ``iceberg`` extra, asked for once: every module of this package that uses pyiceberg imports this first.

pyiceberg is optional (``pip install 'tributary-read[iceberg]'``); without it a mirror must fail with the
line that installs it (MissingDependencyError, exit 10), never with a bare ImportError from deep inside.
"""

from __future__ import annotations

from tributary_read.errors import missing_extra

try:
    import pyiceberg  # noqa: F401 - the probe itself
except ImportError:
    raise missing_extra("pyiceberg", "iceberg") from None

#: The release the mirror is written and tested against (pyproject pins it): the snapshot producers it
#: builds on are pyiceberg's own, and their shape moves between releases.
TESTED = "0.12.0"
