"""Docs as tests: every fenced block of README.md and docs/*.md, and the commands examples/*.py
tell a reader to run, checked in `make test`.

A fence's info string says what a block is: its first word the kind (python, sh, jinja, sql run;
text, json, yaml, toml, ini, procfile checked; mermaid a diagram), then `key=value` options
(`id=NAME`, `output-of=ID`, `serve=/path` or `serve=log:TEXT`, `exit=N`, `file=NAME` (written;
blocks of one name append), `app=NAME` (FLASK_APP; `standalone`: wsgi), `cwd=repository`) and flags
(`norun`, announced visibly just before the fence with "*Not run by make test: why*").
snippets.py finds and checks the blocks; conftest.py runs them; one test module per document.
The commands examples/*.py's docstrings give (their indented lines) run in test_examples.py.
"""
