"""The fence parser and the output comparison the docs tests rest on (no database)."""

from tests.docs.snippets import commands, mermaid_problems, output_matches, parse

NOTED = """Intro.

It needs a PaaS. *Not run by make test: it pushes to a PaaS*

```sh norun
git push heroku main
```

- a list item:

  ```python id=inside
  x = 1
  ```
"""


def test_a_norun_block_and_its_visible_note_go_together():
    blocks, problems = parse(NOTED, "doc.md")
    assert [(b.line, b.kind, b.norun, b.note) for b in blocks] == [
        (5, "sh", True, "*Not run by make test: it pushes to a PaaS*"), (11, "python", False, None)]
    assert blocks[1].text == "x = 1\n" and blocks[1].id == "inside" and str(blocks[0]) == "doc.md:line5"
    assert problems == []
    _, problems = parse(NOTED.replace(" *Not run by make test: it pushes to a PaaS*", ""), "doc.md")
    assert problems == ["doc.md:line5: a norun block without a visible '*Not run by make test: why*' just before it"]
    _, problems = parse(NOTED.replace("sh norun", "sh"), "doc.md")
    assert problems == ["doc.md:line5: the note '*Not run by make test: it pushes to a PaaS*' just before it, "
                        "but it is not marked norun"]
    _, problems = parse("*Not run by make test: nothing*\n\nText.\n\n```sh norun\nls\n```\n", "doc.md")
    assert problems[0] == "doc.md:1: a '*Not run by make test: ...*' note with no norun block just after it"


def test_a_block_without_a_known_kind_is_a_problem():
    _, problems = parse("```\nweb: x\n```\n\n~~~shell\nls\n~~~\n", "doc.md")
    assert problems == ["doc.md:line1: a block with no info string (say what it is: python, sh, text, ...)",
                        "doc.md:line5: unknown kind 'shell' (known: python, sh, jinja, sql, text, json, yaml, "
                        "toml, ini, procfile, mermaid)"]


def test_commands_join_continuations_and_drop_comments_and_prompts():
    assert commands("# set up\n$ pip install \\\n    x  # the wheel\n\nflask run\n") == [
        "pip install x  # the wheel", "flask run"]


def test_a_here_document_stays_with_its_command():
    assert commands("cd x\npython3 - <<'EOF'\nimport sys\n\nprint(1)  # one\nEOF\necho done <<< hi\n") == [
        "cd x", "python3 - <<'EOF'\nimport sys\n\nprint(1)  # one\nEOF", "echo done <<< hi"]


def test_output_matches_whole_lines_with_ellipses():
    shown = "...\nrun ... hello succeeded (attempt 1) ...\nhello, ann\n"
    assert output_matches(shown, "started\nmore\nrun 7 hello succeeded (attempt 1) [0.1s]\nhello, ann  \n")
    assert not output_matches(shown, "run 7 hello succeeded (attempt 2) [0.1s]\nhello, ann\n")
    assert not output_matches(shown, "run 7 hello succeeded (attempt 1) [0.1s]\nhello, ann\nmore\n")


def test_a_mermaid_block_must_name_a_diagram_and_balance_its_brackets():
    assert mermaid_problems("graph TD\n  A[x] --> B(y)\n") == []
    assert mermaid_problems("grph TD\n") == ["the first line names no mermaid diagram type: 'grph TD'"]
    assert mermaid_problems("graph TD\n  A[x --> B\n") == ["line 2: unbalanced []: 'A[x --> B'"]
