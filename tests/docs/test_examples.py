"""The commands examples/*.py's docstrings tell a reader to run, run as written from the
repository's top level (tests/docs/snippets.py's docstring_commands): the example host app's
set-up, site and worker, and its own two test suites (this is the run of those suites in make
test; tests/test_host_app.py runs the host app itself)."""

import re
import shlex

import pytest

from tests.docs.snippets import docstring_commands

DOCS_MIGRATED = False  # the host app's `jobs migrate` makes jobsweb's tables
FILES = ("examples/host_app.py", "examples/test_host_on_postgresql.py", "examples/test_host_on_sqlite.py")
BLOCKS = [block for path in FILES for block in docstring_commands(path)]
for block in BLOCKS:
    block.options["cwd"] = "repository"
    if "--forever" in block.text:
        block.options["serve"] = "log:started:"  # the worker's first line: "worker ... started: concurrency 4"
    elif " run " in block.text:
        block.options["serve"] = "dashboard:/admin/jobs"  # signed in through the host's own sign-in page
# What each suite's last line says (its tests, counted here, not read from the files).
PASSED = {"examples/test_host_on_postgresql.py": "2 passed", "examples/test_host_on_sqlite.py": "3 passed"}


def test_the_examples_give_commands():
    assert [(block.document, block.text.split(" # ")[0].split()[-1]) for block in BLOCKS] == [
        ("examples/host_app.py", "init-db"), ("examples/host_app.py", "migrate"),
        ("examples/host_app.py", "add-account"), ("examples/host_app.py", "run"),
        ("examples/host_app.py", "--forever"),
        ("examples/test_host_on_postgresql.py", "examples/test_host_on_postgresql.py"),
        ("examples/test_host_on_sqlite.py", "examples/test_host_on_sqlite.py")]


@pytest.mark.parametrize("block", BLOCKS, ids=[str(block) for block in BLOCKS])
def test_command(block, docs):
    docs.sign_in = sign_in_to_the_host
    # The docstrings' placeholder: the example host's database (psycopg2's, postgresql://).
    docs.substitute["postgresql://..."] = shlex.quote(docs.url)
    # The PostgreSQL suite twice: the second run finds jobsweb's tables made and empties them.
    for _ in range(2 if block.document == "examples/test_host_on_postgresql.py" else 1):
        output = docs.run(block)
        if block.document in PASSED:
            assert output.splitlines()[-1].strip("= ").startswith(f"{PASSED[block.document]} in "), output[-3000:]
    if block.text.split(" # ")[0].endswith("jobs migrate"):
        assert "jobsweb's schema: applied " in output, output


def sign_in_to_the_host(block, page, prefix):
    """As the account the docstring's add-account made, on the host's own sign-in page, where
    the admin screen sends a person not signed in."""
    [account] = [b.text for b in BLOCKS if "add-account" in b.text]
    email, password = (re.search(rf"{name}=(\S+)", account).group(1) for name in ("ACCOUNT_EMAIL", "ACCOUNT_PASSWORD"))
    page.goto(prefix + "/")
    assert "/login?next=" in page.url, page.url
    page.get_by_label("Email").fill(email)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_load_state()
