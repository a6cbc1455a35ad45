"""What jobs wrote, as the pages show it: secrets in output, errors and traces masked as
key=value, `key: value` and JSON pairs (and URL passwords), terminal controls removed."""

import html as markup
import re

import pytest

from jobsweb import definitions
from jobsweb.web.shown_text import MASK, shown
from tests.conftest import committed
from tests.test_exec import jobs_exec  # noqa: F401 - a fixture
from tests.test_web_runs import add_run

WORDS = ["password", "token", "secret", "auth", "api_key"]
# Colours, OSC 52 (writes the clipboard), an OSC 8 hyperlink, BEL, a C1 CSI, a right-to-left
# override and its isolate, a carriage return.
HOSTILE = "\x1b[31mred\x1b[0m \x1b]52;c;ZXZpbA==\x07\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\ \x07\x9b2J \u202etxt.exe\u2069\r!"


def pre_texts(html):
    return markup.unescape("\n".join(re.findall(r"<pre[^>]*>(.*?)</pre>", html, re.DOTALL)))


@pytest.mark.parametrize("text, expected", [
    ("DB_URL=postgres://app:SECRET@db/prod", f"DB_URL=postgres://app:{MASK}@db/prod"),
    ('{"password": "hunter2", "user": "ann", "api_key": 42}', f'{{"password": {MASK}, "user": "ann", "api_key": {MASK}}}'),
    ("GET /x?token=abc&page=2 PASSWORD=\"two words\" secret='x y'",
     f"GET /x?token={MASK}&page=2 PASSWORD={MASK} secret={MASK}"),
    ("Authorization: Bearer eyJhbGci\nuser: ann", f"Authorization: {MASK}\nuser: ann"),
    ("kwargs: {'user': 'ann', 'password': 'hunter2'}", f"kwargs: {{'user': 'ann', 'password': {MASK}}}"),
    (HOSTILE, "red link  txt.exe\n!"),
    ("a stray \x1b]0;title\nthe next line stays", "a stray \nthe next line stays"),
])
def test_secrets_are_masked_and_terminal_controls_removed(text, expected):
    assert shown(text, WORDS) == expected


def test_a_viewer_sees_a_runs_output_error_and_stack_masked_and_without_controls(sign_in, sql):
    run = add_run(sql, "dead", error=f"connect failed: password=hunter2 {HOSTILE}",
                  stack="Traceback\n  connect(dsn='postgres://app:SECRET@db/prod')", attempts=1)
    sql("""INSERT INTO job_attempts (run_id, attempt, worker, started_at, outcome, error_type, error, stack, output)
           VALUES (%s, 1, 'w1', now(), 'failed', 'RuntimeError', 'password=hunter2', 'api_key=sk_live_1',
                   %s)""", [run, '2026-01-01 INFO app: calling {"token": "tok_9"}\n' + HOSTILE])
    client = sign_in("viewer")
    html = client.get(f"/runs/{run}").get_data(as_text=True)
    for secret in ("hunter2", "SECRET", "sk_live_1", "tok_9"):
        assert secret not in html
    assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]", html)
    assert "red link" in pre_texts(html) and f'{{"token": {MASK}}}' in pre_texts(html)
    listed = client.get("/runs").get_data(as_text=True)
    assert "hunter2" not in listed and "\x1b" not in listed and "\u202e" not in listed


def test_a_ping_body_and_an_exec_commands_output_are_shown_masked(app, sign_in, sql, jobs_exec):  # noqa: F811
    with committed(app):
        definitions.define("backup", None, "0 3 * * *", external=True)
    [(token,)] = sql("SELECT ping_token FROM job_definitions")
    client = sign_in("operator")
    assert client.post(f"/ping/{token}", data=f"PGPASSWORD=ping_pw {HOSTILE}".encode()).status_code == 200
    code, _, err = jobs_exec("backup", "--", "sh", "-c", "echo DB_URL=postgres://app:exec_pw@db/prod")
    assert code == 0, err
    stored = sql("SELECT r.id, a.output FROM job_runs r JOIN job_attempts a ON a.run_id = r.id ORDER BY r.id")
    assert [("ping_pw" in output, "exec_pw" in output) for _, output in stored] == [(True, False), (False, True)]
    for (run_id, _), secret in zip(stored, ("ping_pw", "exec_pw")):
        html = client.get(f"/runs/{run_id}").get_data(as_text=True)
        assert MASK in pre_texts(html) and secret not in html and "\x1b" not in html
