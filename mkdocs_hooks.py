"""MkDocs hooks of the docs site (mkdocs.yml ``hooks``): what the plugins do not do for trib's sources.

Click's help keeps a paragraph that starts with ``\\b`` as it is written, line by line: trib's commands
use it for their lines of examples (``trib etl run JOB.toml ... [--dry-run] [--json]``). mkdocs-click
hands the help to Markdown as prose, which ran those lines together and read ``[--dry-run] [--json]`` as
a reference link. Here each such paragraph becomes a ``text`` code block, as ``trib COMMAND --help``
shows it.

Click 8.3 marks an option given no default with a sentinel (``UNSET``), which mkdocs-click 0.9 printed as
the default of every such option (``Sentinel.UNSET``): here it reads the default as click does (a flag's
is ``False``), and an option without one shows as having none.

Docstrings cross-reference in Sphinx's roles (``:class:`FileSet```, ``:func:`~a.b.c```), which Markdown
shows as the role's name before the code: the API reference shows the code alone (``~``: the last name).
"""

from __future__ import annotations

from typing import Iterable, Iterator

import copy
import re

import click
import mkdocs_click._docs as click_docs

try:
    from click._utils import UNSET
except ImportError:  # click < 8.3: no sentinel, None is "no default"
    UNSET = None

_describe = click_docs._make_description
_option_row = click_docs._format_table_option_row
_CTX = click.Context(click.Command("trib"))


def preformatted(lines: Iterable[str]) -> Iterator[str]:
    """``lines`` with each ``\\b`` paragraph (up to the next blank line) fenced as a code block."""
    fenced = False
    for line in lines:
        if not fenced and line.strip() == "\b":
            fenced = True
            yield "```text"
        elif fenced and not line.strip():
            fenced = False
            yield "```"
            yield ""
        else:
            yield line
    if fenced:
        yield "```"


def _make_description(ctx, remove_ascii_art: bool = False) -> Iterator[str]:
    return preformatted(_describe(ctx, remove_ascii_art))


def _format_table_option_row(option: click.Option) -> str:
    default = option.get_default(_CTX, call=False)
    shown = copy.copy(option)
    shown.default = None if default is UNSET else default
    return _option_row(shown)


_ROLE = re.compile(r":(?:class|func|meth|mod|data|attr|exc|obj):<code>(~?)([^<]*)</code>")


def on_page_content(html: str, **kwargs) -> str:
    return _ROLE.sub(lambda m: f"<code>{m.group(2).rsplit('.', 1)[-1] if m.group(1) else m.group(2)}</code>", html)


def on_startup(command: str, dirty: bool) -> None:
    click_docs._make_description = _make_description
    click_docs._format_table_option_row = _format_table_option_row
