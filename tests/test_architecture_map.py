"""Every repository path docs/ARCHITECTURE.md names exists (issue 42): the map's entries,
the file names of their descriptions and the paths of the prose.

The map is the code block of the "Parts" section. A line at column 0 opens a part and
names its folder (``common/``, ``server/``, …); a line indented by one space is a layer's
heading; a line indented by two to eight spaces is an entry: one path, or several
separated by commas (``statuscharts.py, svg.py``; a name without a slash stands in the
folder of the first), relative to its part's folder, then its description after two
spaces or on the deeper-indented lines below.

An entry must stand exactly where the map puts it. A name elsewhere (a description, the
prose, the glossary) is a path when it has a slash and ends with one (a folder) or with a
known file extension, or when it is a bare file name in a description; it must exist from
the repository's root, from its part's folder, from its entry's folder, or (a document
named the way the docs name each other) from docs/. ``{a,b}`` stands for both names and
``*`` for any, which must match at least one file.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.dockit import ROOT, fenced_blocks, section

MAP = ROOT / "docs" / "ARCHITECTURE.md"
EXTENSIONS = "|".join(("py", "md", "json", "toml", "yml", "yaml", "cfg", "txt", "sh", "sql"))
_SEGMENT = r"[\w.{},*-]+"
_BEFORE = r"(?<![\w/:.{},*-])"
#: A name with a slash: folder segments, then a file with an extension, or a folder's
#: slash followed by no name (``σ²/m``, ``404/409``, ``CSV/.npy`` are not paths).
SLASHED = re.compile(
    rf"{_BEFORE}{_SEGMENT}(?:/{_SEGMENT})*/"
    rf"(?:{_SEGMENT}\.(?:{EXTENSIONS})\b(?![\w/])|(?![\w/.]))"
)
#: A bare file name (in a description: the entry's folder).
BARE = re.compile(rf"{_BEFORE}[\w{{}},*-]+\.(?:{EXTENSIONS})\b(?![\w/])")
#: An entry: its paths (commas between them), then its description after any spaces.
ENTRY = re.compile(
    r"^(?P<indent> {2,8})(?P<entry>[^\s,]+(?:,[ ]*[^\s,]+)*)(?:\s+(?P<description>.*))?$"
)
#: Names the prose gives for what is NOT in the tree ("the root package's folder is named
#: `cli/`, not `ldpem/`"); each must stay absent.
ABSENT = {"ldpem/"}
PART = re.compile(r"^(?P<folder>[\w.-]+/)(?:\s+(?P<rest>.*))?$")


@dataclass(frozen=True)
class Named:
    """A path the document names: the line it is on, the path as written, and the places
    it may stand, any one of which must exist (an entry has exactly one)."""

    line: int
    written: str
    candidates: tuple[Path, ...]


def expand(written: str) -> list[str]:
    """``{a,b}`` expanded (nested braces too); other text unchanged."""
    brace = re.search(r"\{([^{}]*)\}", written)
    if brace is None:
        return [written]
    head, tail = written[: brace.start()], written[brace.end() :]
    return [name for choice in brace[1].split(",") for name in expand(head + choice + tail)]


def exists(path: Path, root: Path) -> bool:
    """Whether ``path`` names something in the tree (``*``: at least one match)."""
    if "*" in path.name or any("*" in part for part in path.parts):
        relative = path.relative_to(root)
        return any(True for _ in root.glob(str(relative)))
    return path.exists()


def folder_of(entry: str) -> str:
    """The folder an entry's first path stands in (``core/`` for ``core/errors.py``)."""
    return entry if entry.endswith("/") else entry.rpartition("/")[0] + "/" * ("/" in entry)


def names_in(text: str, *, bare: bool) -> Iterator[str]:
    """The paths of free text: backticked spans broken across lines rejoined, URLs and
    anchors left out; bare file names too when ``bare``."""
    text = re.sub(r"https?://\S+", " ", text)
    text = re.sub(r"/\s*\n\s*", "/", text)
    found = [m.group(0) for m in SLASHED.finditer(text)]
    if bare:
        found += [m.group(0) for m in BARE.finditer(text) if "/" not in m.group(0)]
    for name in found:
        name = name.split("#", 1)[0].rstrip(",.")
        if name and name not in (".", "./"):
            yield name


def loose(line: int, written: str, *roots: Path) -> list[Named]:
    """A name that may stand under any of ``roots`` (or docs/, for a document)."""
    docs = (ROOT / "docs",) if written.endswith(".md") else ()
    return [
        Named(line, name, tuple(root / name for root in (*roots, *docs)))
        for name in expand(written)
    ]


def map_names(text: str, first_line: int) -> list[Named]:
    """The names of the map's code block, whose first line is line ``first_line``."""
    named: list[Named] = []
    part = ROOT
    entry_folder = ROOT
    for offset, row in enumerate(text.splitlines()):
        line = first_line + offset
        if not row.strip():
            continue
        opened = PART.match(row)
        if opened is not None:
            part = entry_folder = ROOT / opened["folder"]
            named.append(Named(line, opened["folder"], (part,)))
            named += [
                n
                for w in names_in(opened["rest"] or "", bare=True)
                for n in loose(line, w, ROOT, part)
            ]
            continue
        entry = ENTRY.match(row)
        if entry is not None and len(entry["indent"]) < 9:
            items = [item.strip() for item in entry["entry"].split(",")]
            first = folder_of(items[0])
            for item in items:
                where = item if "/" in item or item is items[0] else first + item
                for name in expand(where):
                    named.append(Named(line, name, (part / name,)))
            entry_folder = part / first if first else part
            description = entry["description"] or ""
        else:
            description = row  # a layer's heading, or a description's next line
        named += [
            n
            for written in names_in(description, bare=True)
            for n in loose(line, written, ROOT, part, entry_folder)
        ]
    return named


def prose_names(text: str) -> list[Named]:
    """The names of the prose outside code blocks, from the root, common/ or docs/."""
    named: list[Named] = []
    lines = text.splitlines()
    fenced = False
    paragraph: list[tuple[int, str]] = []

    def flush() -> None:
        joined = "\n".join(row for _, row in paragraph)
        if paragraph:
            start = paragraph[0][0]
            for written in names_in(joined, bare=False):
                named.extend(loose(start, written, ROOT, ROOT / "common"))
        paragraph.clear()

    for number, row in enumerate(lines, start=1):
        if row.lstrip().startswith("```"):
            flush()
            fenced = not fenced
            continue
        if fenced:
            continue
        if not row.strip():
            flush()
        else:
            paragraph.append((number, row))
    flush()
    return named


def document_names(text: str) -> list[Named]:
    """Every path ``text`` (an ARCHITECTURE.md) names: its map's, then its prose's."""
    parts = section(text, "Parts")
    block = next(b for b in fenced_blocks(parts, "Parts") if b.language == "")
    start = text.splitlines().index("## Parts") + 1 + block.line + 1
    return map_names(block.text, start) + prose_names(text)


def missing(named: list[Named]) -> list[str]:
    """``document:line: path`` for each named path found nowhere it may stand."""
    return [
        f"docs/ARCHITECTURE.md:{n.line}: {n.written}"
        for n in named
        if n.written not in ABSENT and not any(exists(c, ROOT) for c in n.candidates)
    ]


def test_every_path_the_map_names_exists() -> None:
    named = document_names(MAP.read_text())
    # The map names well over a hundred paths: a parser that found few has lost the map.
    assert len(named) > 100, len(named)
    assert missing(named) == []
    assert not any((ROOT / name).exists() for name in ABSENT), ABSENT


SAMPLE = """# A map

## Parts

```
common/   ldpem.common   the library
 core (common/core/ and models/): the walk
  core/truncation.py       φ, with lazy.py (a bare name: the entry's folder)
  core/errors.py, naming.py
                           holder_round; see EXTENDING.md and models/{gmm,mrm}.py
  models/                  the models
  core/gone.py             moved away
  core/lazy.py, gone2.py   the second one is missing
server/   ldpem.server   the coordinator
  app.py                   FastAPI; store.py beside it
  nowhere/                 a folder that is not there
```

Prose: `tests/test_layers.py`, `models/base.py` (under common/), `cli/\ngone3.py` and
[a link](perf/HISTORY.md#anchor); σ²/m and 404/409 are not paths; http://x.org/a.py
neither.
"""


def test_the_parser_finds_entries_descriptions_and_prose_and_names_what_is_missing() -> None:
    named = document_names(SAMPLE)
    written = {n.written for n in named}
    assert {
        "common/",
        "common/core/",
        "core/truncation.py",
        "lazy.py",
        "core/errors.py",
        "core/naming.py",
        "EXTENDING.md",
        "models/gmm.py",
        "models/mrm.py",
        "server/",
        "app.py",
        "store.py",
        "tests/test_layers.py",
        "models/base.py",
        "perf/HISTORY.md",
    } <= written
    assert not {"m", "409", "σ²/m", "x.org/a.py"} & written
    assert [line.split(": ", 1)[1] for line in missing(named)] == [
        "core/gone.py",
        "core/gone2.py",
        "nowhere/",
        "cli/gone3.py",
    ]


@pytest.mark.parametrize(
    ("written", "expanded"),
    [
        ("a.py", ["a.py"]),
        ("m/{a,b}.py", ["m/a.py", "m/b.py"]),
        ("{x,y}/{1,2}", ["x/1", "x/2", "y/1", "y/2"]),
    ],
)
def test_braces_stand_for_each_name(written: str, expanded: list[str]) -> None:
    assert expand(written) == expanded
