"""Every `trib` command shown in README.md and docs/ names real subcommands and flags, with values that parse.

The commands are extracted from fenced code blocks (continuation lines joined)
and from inline code spans that start with ``trib``; each is checked against
the click command it names (no subprocess: the command tree is introspected),
and each literal duration or time it passes is read by the one parser
(:mod:`tributary_read.timespec`), so a doc cannot show a spelling trib refuses.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import click
import pytest

from tributary_read.cli.context import Duration
from tributary_read.cli.main import cli
from tributary_read.timespec import parse_duration_ms, parse_instant

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parent.parent
DOCS = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]  # the site's pages in folders too
#: Flags of the root group, allowed before the subcommand.
_FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)
_INLINE = re.compile(r"`(trib [a-z-]+(?![a-z:-])[^`]*)`")  # not a progress line's "trib etl: ..."
_STOP = re.compile(r"\s(?:\||&&|;|>|2>|<)\s")
_INSTANT_FLAGS = {"--schedule-time", "--start", "--end"}
#: Flags read by the duration parser in the command body (not a click Duration type).
_DURATION_FLAGS = {"--period", "--lag", "--window", "--lookback", "--min-age", "--full-scan-every"}
_LITERAL_TIME = re.compile(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}")


def _commands() -> list[tuple[str, str]]:
    """(where, command text) for every trib invocation shown in the docs."""
    found = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for block in _FENCE.finditer(text):
            body = re.sub(r"\\\n\s*", " ", block.group(1))
            for line in body.splitlines():
                code = re.split(r"(?:^|\s)#", line, maxsplit=1)[0]  # a shell comment is prose
                m = re.search(r"^\s*(?:\$ )?(?:[\w./-]*/)?trib\s+([a-z-].*)$", code)
                if m:
                    found.append((f"{doc.name}: {line.strip()[:80]}", "trib " + m.group(1)))
        for m in _INLINE.finditer(text):
            found.append((f"{doc.name}: `{m.group(1)[:80]}`", m.group(1).replace("\\|", "|")))
    return found


COMMANDS = _commands()


def is_inline(where: str) -> bool:
    """Whether :func:`_commands` found the command in an inline code span (prose), not a fenced block."""
    return where.split(": ", 1)[1].startswith("`")


def _resolve(words: list[str]) -> tuple[click.Command, list[str]]:
    """The deepest command the leading words name, and the words after it."""
    ctx = click.Context(cli)
    cmd: click.Command = cli
    rest = list(words)
    while isinstance(cmd, click.Group) and rest and re.fullmatch(r"[a-z][a-z-]*", rest[0]):
        sub = cmd.get_command(ctx, rest[0])
        if sub is None:
            raise AssertionError(f"no command {rest[0]!r} under {cmd.name!r}")
        cmd, rest = sub, rest[1:]
    return cmd, rest


def _tokens(text: str) -> list[str]:
    text = _STOP.split(text, 1)[0]
    try:
        return shlex.split(text)
    except ValueError:  # an unbalanced quote inside a bracketed synopsis: split on spaces
        return text.split()


def test_the_docs_show_trib_commands():
    assert len(COMMANDS) > 60  # guards the extraction against finding nothing


@pytest.mark.parametrize("text,error", [
    ("trib files ROOT --lagg 10m", "has no option --lagg"),
    ("trib filez ROOT", "no command 'filez'"),
    ("trib files ROOT --schedule-time 2024-01-01T05:00:00 --period 1h", "has no UTC offset"),
    ("trib clean ROOT --older-than 3600", "has no unit"),
    ("trib consumer rest ROOT c", "no command 'rest'"),
])
def test_the_checker_catches_a_wrong_command(text, error):
    with pytest.raises((AssertionError, Exception), match=error):
        _check("test", text)


@pytest.mark.parametrize("where,text", COMMANDS, ids=[w for w, _ in COMMANDS])
def test_each_shown_command_exists_with_its_flags_and_values(where, text):
    _check(where, text)


def _check(where: str, text: str) -> None:
    words = _tokens(text)[1:]
    root_params = {o: p for p in cli.params for o in (*p.opts, *p.secondary_opts)}
    while words and words[0] in root_params:  # trib -o k=v files ...
        words = words[1:] if root_params[words[0]].is_flag else words[2:]
    cmd, rest = _resolve(words)
    assert not isinstance(cmd, click.Group) or not rest or rest[0].startswith("-") or rest[0] in ("…", "..."), \
        (where, rest[:1])
    params = {o: p for p in cmd.params for o in (*p.opts, *p.secondary_opts)}
    params.update({"--help": None, "-h": None})
    for i, tok in enumerate(rest):
        flag = re.match(r"^\[?(--?[a-zA-Z][a-zA-Z0-9-]*)", tok)
        if not flag or tok.startswith("---"):
            continue
        name = flag.group(1)
        if name.startswith("-") and not name.startswith("--") and len(name) > 2:
            continue  # -0 style shorts are matched whole below; '-5' and the like are values
        if name not in params and cmd.context_settings.get("ignore_unknown_options"):
            continue  # a pass-through command's own flags (trib hive beeline -e ...)
        assert name in params, f"{where}: {cmd.name} has no option {name}"
        value = rest[i + 1].strip("[]'\"") if i + 1 < len(rest) else ""
        p = params[name]
        is_duration = name in _DURATION_FLAGS or (p is not None and isinstance(p.type, Duration))
        if is_duration and re.match(r"^[0-9]", value):
            parse_duration_ms(value, name)
        if name in _INSTANT_FLAGS and _LITERAL_TIME.match(value):
            parse_instant(value, None, name)


# -- issue 26, item 3: the window comments say what trib answers (tests/test_docs_run.py runs the commands) --

_STAMP = r"(\d{4}-\d\d-\d\dT\d\d:\d\d(?::\d\d(?:\.\d{3})?)?)"
_WINDOW_COMMENT = re.compile(r"\[" + _STAMP + r"[^,\]]*,\s*" + _STAMP + r"[^\]]*\]")


def _windows_shown() -> list[tuple[str, str, tuple[str, str]]]:
    """(where, command, (start, end)) for each scheduled command next to a comment naming its window."""
    found = []
    for doc in DOCS:
        for block in _FENCE.finditer(doc.read_text(encoding="utf-8")):
            lines = re.sub(r"\\\n\s*", " ", block.group(1)).splitlines()
            for i, line in enumerate(lines):
                code = re.split(r"(?:^|\s)#", line, maxsplit=1)[0]
                if "--schedule-time" not in code or not re.search(r"\btrib\s", code):
                    continue
                near = [lines[i - 1]] if i and lines[i - 1].lstrip().startswith("#") else []
                near += [line[len(code):]]
                for after in lines[i + 1:]:
                    if not after.lstrip().startswith("#"):
                        break
                    near.append(after)
                m = _WINDOW_COMMENT.search(" ".join(near))
                if m:
                    found.append((f"{doc.name}: {line.strip()[:60]}", code.strip(), (m.group(1), m.group(2))))
    return found


WINDOWS = _windows_shown()


def test_the_docs_show_window_comments():
    assert WINDOWS  # docs/engines.md's window (the others' windows run, and print, in tests/test_docs_examples.py)


def _window_of(text: str) -> dict:
    from tributary_read.read.window import TimeWindow

    words = _tokens(text)
    value = {w: words[i + 1] for i, w in enumerate(words[:-1]) if w.startswith("--")}
    window = TimeWindow.for_schedule(
        schedule_time=value["--schedule-time"], period_ms=parse_duration_ms(value["--period"]),
        lag_ms=parse_duration_ms(value["--lag"]) if "--lag" in value else None,
        form=value.get("--window-form"),
        window_ms=parse_duration_ms(value["--window"]) if "--window" in value else None)
    assert window is not None
    return window.to_json()


@pytest.mark.parametrize("where,text,shown", WINDOWS, ids=[w for w, _, _ in WINDOWS])
def test_each_window_comment_is_what_trib_answers(where, text, shown):
    answer = _window_of(text)
    for stamp, iso in zip(shown, (answer["start"], answer["end"])):
        assert iso.startswith(stamp), f"{where}: the comment says [{shown[0]}, {shown[1]}], trib answers " \
                                      f"[{answer['start']}, {answer['end']}]"


def test_the_install_instructions_work_from_a_checkout():
    """tributary-read is not on PyPI: the README's install line installs the checkout."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    installs = [line for block in _FENCE.finditer(readme) for line in block.group(1).splitlines()
                if re.search(r"\bpip install\b", line) and not line.lstrip().startswith("#")]
    assert installs and all(re.search(r"pip install (?:-e )?'\.\[", line) for line in installs), installs
    etl = (REPO / "docs" / "etl.md").read_text(encoding="utf-8")
    assert "venv-pack -p env -o env.tar.gz" in etl and "MB" in etl


def test_the_plain_directory_format_message_is_balanced():
    from tributary_read.errors import InvalidInputError
    from tributary_read.read.fileset import FileSet
    from tributary_read.spark.read import _read_format

    with pytest.raises(InvalidInputError) as e:
        _read_format(None, FileSet("mtime", (), root="file:///data/flink"), None, None, None)
    message = str(e.value)
    assert "options={'format': 'text'|'csv'|'jsonl'|'parquet'} or hive_table=" in message
    assert message.count("{") == message.count("}")
