"""The fenced blocks of a document, found and checked: README.md's and docs/*.md's code runs in
`make test` (docs-as-tests; the convention is in tests/docs/__init__.py).

A document's test module (tests/docs/test_readme.py is one) is three lines and its checks:

    from tests.docs.snippets import Document, fence_test

    DOC = Document("docs/REFERENCE.md")
    test_fences = fence_test(DOC)              # every block has a known kind; norun notes are visible

    @pytest.mark.parametrize("block", DOC.blocks, ids=DOC.ids)
    def test_block(block, docs):               # `docs`: tests/docs/conftest.py's Runner for DOC
        docs.run(block)                        # python/sh/jinja/sql run, text/json/... checked
        if block.id == "metrics":              # a block's own check, after it ran
            assert ...

Blocks run in document order (pytest keeps parametrize's order) in one Runner per module: one
namespace for the python blocks, one scratch directory for the sh ones, one scratch database
and host app (conftest.py). Later tests of the module read `docs.namespace`, `docs.outputs[id]`.
"""

import configparser
import json
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

EXECUTED = ("python", "sh", "jinja", "sql")
CHECKED = ("text", "json", "yaml", "toml", "ini", "procfile")
DIAGRAMS = ("mermaid",)
KINDS = EXECUTED + CHECKED + DIAGRAMS

# The visible announcement of a norun block, in the paragraph just before its fence.
NOTE = re.compile(r"\*Not run by make test:[^*]+\*")
FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")


@dataclass
class Block:
    """One fenced block: where it is, what its info string says, and its text."""

    document: str  # relative to the repository: README.md, docs/REFERENCE.md
    line: int  # of the opening fence, 1-based
    kind: str  # the info string's first word ("" when there is none)
    options: dict = field(default_factory=dict)  # key=value words of the info string
    flags: set = field(default_factory=set)  # the other words (norun)
    text: str = ""
    note: str | None = None  # the visible "*Not run by make test: ...*" before it

    @property
    def id(self):
        """`id=NAME` of the info string, else the line of its fence (line57)."""
        return self.options.get("id") or f"line{self.line}"

    @property
    def norun(self):
        return "norun" in self.flags

    @property
    def category(self):
        """How the terminal summary counts it: run, checked, diagram or norun."""
        if self.norun:
            return "norun"
        if self.kind in EXECUTED:
            return "run"
        return "diagram" if self.kind in DIAGRAMS else "checked"

    def __str__(self):
        return f"{self.document}:{self.id}"


class Document:
    """A Markdown document's fenced blocks (`blocks`, in order) and what is wrong with its fences
    (`problems`: an unknown or missing kind, a norun block without its visible note, a note with
    no norun block after it)."""

    def __init__(self, path):
        self.path = ROOT / path
        self.name = Path(path).as_posix()
        self.blocks, self.problems = parse(self.path.read_text(), self.name)

    @property
    def ids(self):
        return [str(block) for block in self.blocks]


def parse(markdown, name):
    """(blocks, problems) of a Markdown text: a small CommonMark fence parser (``` or ~~~ of
    three or more, indented or not, e.g. inside a list item; closed by the same character at
    least as long with nothing after it; an unclosed fence runs to the end)."""
    lines = markdown.splitlines()
    blocks, problems = [], []
    paragraphs = []  # the paragraphs since the last fence, each a list of its (line number, text)

    def unmatched_notes(paragraphs):
        return [f"{name}:{number}: a '*Not run by make test: ...*' note with no norun block just after it"
                for paragraph in paragraphs for number, text in paragraph if NOTE.search(text)]

    i = 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if match is None or (match["fence"][0] == "`" and "`" in match["info"]):
            if not lines[i].strip():
                if paragraphs and paragraphs[-1]:
                    paragraphs.append([])
            elif paragraphs:
                paragraphs[-1].append((i + 1, lines[i]))
            else:
                paragraphs.append([(i + 1, lines[i])])
            i += 1
            continue
        opening, indent = match["fence"], len(match["indent"])
        words = match["info"].split()
        kind = words[0] if words else ""
        options = dict(word.split("=", 1) for word in words[1:] if "=" in word)
        flags = {word for word in words[1:] if "=" not in word}
        line = i + 1
        body = []
        i += 1
        while i < len(lines):
            closing = FENCE.match(lines[i])
            if closing and closing["fence"][0] == opening[0] and len(closing["fence"]) >= len(opening) \
                    and not closing["info"].strip():
                break
            # The fence's own indentation is not part of the text (a block inside a list item).
            text = lines[i]
            body.append(text[min(indent, len(text) - len(text.lstrip())):])
            i += 1
        i += 1
        # The paragraph just before the fence (blank lines between allowed); notes in any
        # earlier paragraph since the last fence announce nothing.
        filled = [paragraph for paragraph in paragraphs if paragraph]
        before = "\n".join(text for _, text in filled[-1]) if filled else ""
        problems += unmatched_notes(filled[:-1])
        paragraphs = []
        note = NOTE.search(before)
        block = Block(name, line, kind, options, flags, "\n".join(body) + "\n", note.group(0) if note else None)
        blocks.append(block)
        if not kind:
            problems.append(f"{block}: a block with no info string (say what it is: python, sh, text, ...)")
        elif kind not in KINDS:
            problems.append(f"{block}: unknown kind {kind!r} (known: {', '.join(KINDS)})")
        if block.norun and not block.note:
            problems.append(f"{block}: a norun block without a visible '*Not run by make test: why*' just before it")
        if block.note and not block.norun:
            problems.append(f"{block}: the note {block.note!r} just before it, but it is not marked norun")
    problems += unmatched_notes(paragraphs)
    return blocks, problems


def fence_test(doc):
    """A test function for a document's module: every block has a known kind, and norun blocks
    and visible notes go together."""

    def test_fences():
        assert doc.problems == []

    return test_fences


HEREDOC = re.compile(r"(?<!<)<<(?!<)-?\s*(['\"]?)(\w+)\1")


def commands(text):
    """The command lines of an sh block: `\\` continuations joined, comments, blank lines and
    `$ ` prompts dropped (bash itself drops a comment at the end of a line); a here-document
    (`python3 - <<'EOF'` ... `EOF`) stays with its command, as one."""
    joined, pending = [], ""
    lines = iter(text.splitlines())
    for line in lines:
        heredoc = HEREDOC.search(line)
        if heredoc and not line.lstrip().startswith("#"):
            body = [line]
            for more in lines:
                body.append(more)
                if more.strip() == heredoc.group(2):
                    break
            joined.append((pending + "\n".join(body)).strip())
            pending = ""
            continue
        if line.rstrip().endswith("\\"):
            pending += line.strip()[:-1].rstrip() + " "
            continue
        stripped = (pending + line.strip()).strip()
        pending = ""
        if stripped.startswith("$ "):
            stripped = stripped[2:]
        if stripped and not stripped.startswith("#"):
            joined.append(stripped)
    if pending.strip():
        joined.append(pending.strip())
    return joined


def output_pattern(expected):
    """A regex for a `text output-of=...` block: each line whole, `...` any text within a line,
    a line of only `...` any number of lines (trailing spaces ignored)."""
    parts = []
    for line in expected.rstrip("\n").splitlines():
        if line.strip() == "...":
            parts.append(r"(?:[^\n]*\n)*?")
        else:
            parts.append("[^\n]*".join(re.escape(piece) for piece in line.rstrip().split("...")) + r"\n")
    return re.compile("".join(parts))


def output_matches(expected, actual):
    """Does `actual` (a command's whole output) read as the `expected` text block says?"""
    actual = "".join(line.rstrip() + "\n" for line in actual.splitlines())
    return output_pattern(expected).fullmatch(actual) is not None


def procfile_lines(text):
    """{process: command} of a Procfile's text."""
    lines = {}
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            name, _, command = line.partition(":")
            lines[name.strip()] = " ".join(command.split())
    return lines


MERMAID_DIAGRAMS = ("graph", "flowchart", "sequenceDiagram", "classDiagram", "stateDiagram", "stateDiagram-v2",
                    "erDiagram", "gantt", "pie", "journey", "gitGraph", "mindmap", "timeline")


def mermaid_problems(text):
    """What keeps a mermaid block from being a diagram: an unknown diagram type on its first line,
    unbalanced brackets or quotes, a `subgraph` without its `end`."""
    lines = [line for line in text.splitlines() if line.strip() and not line.strip().startswith("%%")]
    if not lines or lines[0].split()[0] not in MERMAID_DIAGRAMS:
        return [f"the first line names no mermaid diagram type: {lines[0] if lines else ''!r}"]
    problems = []
    for number, line in enumerate(lines, 1):
        unquoted = re.sub(r'"[^"]*"', "", line)
        if unquoted.count('"'):
            problems.append(f"line {number}: an unclosed quote: {line.strip()!r}")
        for opening, closing in ("()", "[]", "{}"):
            if unquoted.count(opening) != unquoted.count(closing):
                problems.append(f"line {number}: unbalanced {opening}{closing}: {line.strip()!r}")
    opened = sum(1 for line in lines if line.split()[0] == "subgraph")
    ended = sum(1 for line in lines if line.strip() == "end")
    if opened != ended:
        problems.append(f"{opened} subgraph and {ended} end")
    return problems


def parsed(block):
    """A json/yaml/toml/ini block's content, parsed (a syntax error fails with its position)."""
    if block.kind == "json":
        return json.loads(block.text)
    if block.kind == "toml":
        return tomllib.loads(block.text)
    if block.kind == "ini":
        config = configparser.ConfigParser()
        config.read_string(block.text, source=str(block))
        return config
    if block.kind == "yaml":
        try:
            import yaml
        except ImportError:
            raise AssertionError(f"{block}: checking a yaml block needs PyYAML (pyproject.toml's dev extra)") from None
        return yaml.safe_load(block.text)
    raise ValueError(f"{block}: a {block.kind} block is not parsed")


def docstring_commands(path):
    """The commands a Python file's module docstring tells a reader to run: its indented lines
    (examples/*.py: `    DATABASE_URL=postgresql://... pytest examples/...`), one sh Block
    each, named by the file and the line."""
    import ast

    source = (ROOT / path).read_text()
    tree = ast.parse(source)
    if not (tree.body and isinstance(tree.body[0], ast.Expr) and isinstance(tree.body[0].value, ast.Constant)):
        return []
    first = tree.body[0].lineno  # the docstring's opening line
    blocks = []
    for offset, line in enumerate(tree.body[0].value.value.splitlines()):
        if line.startswith("    ") and line.strip():
            blocks.append(Block(Path(path).as_posix(), first + offset, "sh", text=line.strip() + "\n"))
    return blocks
