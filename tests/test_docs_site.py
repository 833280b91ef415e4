"""The docs site (mkdocs.yml, `make docs`): it builds strict, and its exit-code table is the code's.

The build runs ``mkdocs build --strict`` as a user does, into a temporary directory: a broken link, an
anchor that is not there, a page left out of the nav or a docstring the API reference cannot render fails
here, not on the day someone publishes the site. The exit-code page is written by hand (it says what to
do, which no class knows); the code owns which codes and classes exist, so the page must list exactly
those, each class on the row of its own code.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import click
import pytest

from tributary_read.exits import INTERRUPTED, TERMINATED, error_classes, error_codes

REPO = Path(__file__).resolve().parent.parent
EXIT_CODES = REPO / "docs" / "concepts" / "exit-codes.md"


def _rows() -> dict[int, str]:
    rows = {}
    for line in EXIT_CODES.read_text(encoding="utf-8").splitlines():
        m = re.match(r"\|\s*(\d+)\s*\|", line)
        if m:
            code = int(m.group(1))
            assert code not in rows, f"exit code {code} has two rows in {EXIT_CODES.name}"
            rows[code] = line
    return rows


@pytest.mark.unit
def test_the_exit_code_table_lists_every_code_and_class_of_the_code():
    rows = _rows()
    # 0 success, 1 unexpected, 2 click's usage error, the signals, and every error class's code
    expected = {0, 1, click.UsageError.exit_code, INTERRUPTED, TERMINATED} | error_codes()
    assert set(rows) == expected, f"the page lists {sorted(rows)}, the code defines {sorted(expected)}"
    classes = {cls.__name__: cls.exit_code for cls in error_classes()[1:]}  # the root: exit 1, never raised bare
    for name, code in classes.items():
        assert f"`{name}`" in rows[code], f"{name} (exit {code}) is not on the row of exit {code}"
    for code, row in rows.items():
        for name in re.findall(r"`([A-Z]\w*Error)`", row):
            assert classes.get(name) == code, f"row {code} names {name}, which exits {classes.get(name)}"


def test_the_site_builds_strict_with_every_command_and_page(tmp_path):
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    # No -q: it drops mkdocs' log below ERROR, and --strict then counts no warning and passes.
    p = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(site)],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-4000:]
    # The CLI group is lazy: every command must still be rendered, with its subcommands.
    from tributary_read.cli.main import COMMANDS, cli

    cli_page = (site / "reference" / "cli" / "index.html").read_text(encoding="utf-8")
    ctx = click.Context(cli)
    assert "Sentinel" not in cli_page, "an option without a default shows click's sentinel (mkdocs_hooks.py)"
    for name in COMMANDS:
        assert f'id="trib-{name}"' in cli_page, f"trib {name} is missing from the CLI reference"
        cmd = cli.get_command(ctx, name)
        for sub in getattr(cmd, "commands", {}):
            assert f'id="trib-{name}-{sub}"' in cli_page, f"trib {name} {sub} is missing from the CLI reference"
    api = (site / "reference" / "api" / "index.html").read_text(encoding="utf-8")
    for obj in ("tributary_read.table.config.Table", "tributary_read.spark.write.write",
                "tributary_read.iceberg.mirror.sync", "tributary_read.errors.TributaryError"):
        assert f'id="{obj}"' in api, f"{obj} is missing from the API reference"
    assert ":class:" not in api, "a docstring's Sphinx role shows as text (mkdocs_hooks.py)"
    # The changelog is included from CHANGELOG.md, not copied: its first heading after the title shows.
    first = next(ln for ln in (REPO / "CHANGELOG.md").read_text(encoding="utf-8").splitlines() if ln.startswith("## "))
    assert first[3:].strip() in (site / "changelog" / "index.html").read_text(encoding="utf-8")
    assert not (site / "kafka-broker-notes").exists()  # contributors' notes on the test broker: not a user page
    # README.md is not a page of the site (GitHub renders it), so mkdocs checks none of its links: this does.
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    for target, anchor in re.findall(r"\]\((?!https?:)([^)#\s]+)(?:#([^)\s]+))?\)", readme):
        assert (REPO / target).exists(), f"README links {target}, which does not exist"
        if anchor and target.startswith("docs/") and target.endswith(".md"):
            page = Path(target).relative_to("docs").with_suffix("")
            html = site / (page.parent if page.name == "index" else page) / "index.html"
            assert f'id="{anchor}"' in html.read_text(encoding="utf-8"), f"README links {target}#{anchor}: no such anchor"
