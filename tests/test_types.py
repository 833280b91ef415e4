"""The core packages type-check: mypy, with pyproject's ``[tool.mypy]``, over io, table, write and read.

The package ships ``py.typed``, so users' type checkers read these annotations
as promises: an annotation mypy disproves is a wrong promise, and an Optional
used as if always set is where a None reaches code that never expected one.
mypy is run as a process over the working tree, as a developer would run it.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from conftest import REPO

pytestmark = pytest.mark.unit

#: The packages whose every module must check clean (modules they import are checked too).
CORE = ["tributary_read/io", "tributary_read/table", "tributary_read/write", "tributary_read/read", "tributary_read/iceberg"]
_ERROR = re.compile(r"^(?P<path>[^:\s]+\.py):\d+(?::\d+)?: error: ", re.M)
_CHECKED = re.compile(r"\(checked (\d+) source files?\)")


def test_py_typed_marks_the_package():
    assert (REPO / "tributary_read" / "py.typed").is_file()


def test_core_packages_type_check_clean():
    proc = subprocess.run([sys.executable, "-m", "mypy", "--config-file", "pyproject.toml", *CORE],
                          cwd=REPO, capture_output=True, text=True)
    out = proc.stdout + proc.stderr
    assert proc.returncode in (0, 1), out  # 2: mypy itself failed (bad config, a crash), nothing was checked
    expected = sum(1 for pkg in CORE for _ in (REPO / pkg).glob("*.py"))
    checked = _CHECKED.search(out) or re.search(r"no issues found in (\d+) source files?", out)
    assert checked is not None and int(checked.group(1)) == expected, out
    errors = [line for line in out.splitlines() if _ERROR.match(line)]
    assert errors == [] and proc.returncode == 0, "\n".join(errors) or out
