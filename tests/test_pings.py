"""Ping URLs: scripts report runs of an external definition with curl, without signing in."""

import os
import re
import subprocess
import sys
import urllib.request

import pytest

from jobsweb import definitions
from jobsweb.core.database import libpq_url
from tests.conftest import PASSWORD, ROOT, committed, csrf_token, wait_for
from tests.test_deploy import free_port, get

# README, "Or call its ping URL": "at most 10 runs in any 10 seconds" and "over 10 KB it is cut".
PING_BURST = 10
BODY_MAX_BYTES = 10 * 1024


@pytest.fixture
def token(app, sql):
    with committed(app):
        definitions.define("backup", None, "0 3 * * *", external=True)
    [(token,)] = sql("SELECT ping_token FROM job_definitions")
    return token


def runs(sql):
    return sql("SELECT r.status, r.last_error, a.output FROM job_runs r "
               "LEFT JOIN job_attempts a ON a.run_id = r.id ORDER BY r.id")


@pytest.mark.parametrize("method", ["GET", "POST"])
def test_a_ping_records_a_succeeded_run_without_sign_in_or_csrf(client, token, sql, method):
    response = client.open(f"/ping/{token}", method=method)
    assert response.status_code == 200 and response.get_data(as_text=True) == "OK\n"
    assert response.mimetype == "text/plain" and "Set-Cookie" not in response.headers
    assert runs(sql) == [("succeeded", None, None)]
    assert sql("SELECT last_status FROM job_definitions") == [("succeeded",)]


@pytest.mark.parametrize("path", ["", "/start", "/fail", "/0"])
def test_a_head_request_is_never_a_ping(client, token, sql, path):
    response = client.head(f"/ping/{token}{path}")
    assert response.status_code == 405 and response.headers["Allow"] == "GET, POST"
    assert runs(sql) == []


def test_start_opens_a_running_run_that_the_next_success_closes_with_its_body_as_output(client, token, sql):
    assert client.get(f"/ping/{token}/start").status_code == 200
    assert sql("SELECT status, locked_by, locked_until > now() FROM job_runs") == [("running", "ping", True)]
    assert client.post(f"/ping/{token}", data=b"dumped 42 tables\n").status_code == 200
    assert runs(sql) == [("succeeded", None, "dumped 42 tables\n")]


def test_start_then_fail_closes_the_run_dead(client, token, sql):
    client.post(f"/ping/{token}/start")
    client.post(f"/ping/{token}/fail", data=b"pg_dump: connection refused")
    assert runs(sql) == [("dead", "the script reported a failure", "pg_dump: connection refused")]
    assert sql("SELECT last_status, failure_count FROM job_definitions") == [("dead", 1)]


def test_a_second_start_before_any_end_ends_the_first_run_dead(client, token, sql):
    client.get(f"/ping/{token}/start")
    client.get(f"/ping/{token}/start")
    client.get(f"/ping/{token}")
    assert [(status, error) for status, error, _ in runs(sql)] == [
        ("dead", "a new /start came before this run's end was reported"), ("succeeded", None)]


def test_fail_without_start_records_a_dead_run(client, token, sql):
    assert client.get(f"/ping/{token}/fail").status_code == 200
    assert runs(sql) == [("dead", "the script reported a failure", None)]


@pytest.mark.parametrize("code, status, error", [(0, "succeeded", None), (3, "dead", "exit code 3"),
                                                 (255, "dead", "exit code 255")])
def test_an_exit_code_ping_records_the_run_by_its_code(client, token, sql, code, status, error):
    assert client.post(f"/ping/{token}/{code}").status_code == 200
    assert runs(sql) == [(status, error, None)]


def test_an_exit_code_over_255_is_refused_and_writes_nothing(client, token, sql):
    assert client.get(f"/ping/{token}/256").status_code == 400
    assert client.get(f"/ping/{token}/-1").status_code == 404
    assert runs(sql) == []


@pytest.mark.parametrize("path", ["/ping/{bad}", "/ping/{bad}/start", "/ping/{bad}/fail", "/ping/{bad}/0"])
def test_an_unknown_token_is_a_404_that_says_nothing(client, token, sql, path):
    for bad in ("nosuchtoken", token[:-1], "x" * 500):
        response = client.post(path.format(bad=bad), data=b"hello")
        assert response.status_code == 404 and response.get_data() == b""
    assert runs(sql) == []


def test_the_token_of_a_definition_that_is_no_longer_external_stops_working(app, client, token, sql):
    with committed(app):
        definitions.define("backup", "jobsweb.noop", "0 3 * * *")
    assert client.get(f"/ping/{token}").status_code == 404


def test_a_body_over_10_kb_is_cut_not_refused(client, token, sql):
    body = b"a" * (BODY_MAX_BYTES - 1) + b"bc" + b"z" * 2_000_000  # over JOBSWEB_MAX_REQUEST_BYTES too
    assert client.post(f"/ping/{token}", data=body).status_code == 200
    [(_, _, output)] = runs(sql)
    assert output.startswith("a" * (BODY_MAX_BYTES - 1) + "b\n[cut: the body was over 10 KB]")


def test_a_body_with_bad_utf8_or_nul_is_stored_readably(client, token, sql):
    client.post(f"/ping/{token}/1", data=b"bad \xff byte and \x00 nul")
    [(_, _, output)] = runs(sql)
    assert output == "bad \ufffd byte and \\x00 nul"


def test_pings_past_the_burst_get_429_with_retry_after_and_write_nothing(client, token, sql):
    for _ in range(PING_BURST):
        assert client.get(f"/ping/{token}").status_code == 200
    response = client.get(f"/ping/{token}/fail")
    assert response.status_code == 429 and 1 <= int(response.headers["Retry-After"]) <= 10
    assert len(runs(sql)) == PING_BURST
    # The database's clock decides, so time passes by ageing the runs: 9 s old, they still count.
    sql("UPDATE job_runs SET created_at = now() - interval '9 seconds'")
    response = client.get(f"/ping/{token}")
    assert response.status_code == 429 and response.headers["Retry-After"] == "1"
    # The oldest past the 10 s window: one ping goes through, and the next is refused again.
    sql("UPDATE job_runs SET created_at = now() - interval '10 seconds' WHERE id = 1")
    assert client.get(f"/ping/{token}").status_code == 200
    assert client.get(f"/ping/{token}").status_code == 429
    # All of them past it: a whole burst again.
    sql("UPDATE job_runs SET created_at = now() - interval '10 seconds'")
    assert [client.get(f"/ping/{token}").status_code for _ in range(PING_BURST + 1)] == [200] * PING_BURST + [429]
    assert len(runs(sql)) == 2 * PING_BURST + 1
    # Another definition has a bucket of its own.
    other = client.application
    with committed(other):
        definitions.define("other", None, "0 3 * * *", external=True)
    [(other_token,)] = sql("SELECT ping_token FROM job_definitions WHERE name = 'other'")
    assert client.get(f"/ping/{other_token}").status_code == 200


def test_a_ping_for_a_due_slot_counts_as_its_report(client, token, sql):
    sql("UPDATE job_definitions SET next_run_at = now() - interval '1 minute'")
    client.get(f"/ping/{token}/start")
    assert sql("SELECT scheduled_for IS NOT NULL FROM job_runs") == [(True,)]
    assert sql("SELECT next_run_at > now() FROM job_definitions") == [(True,)]


def test_the_definition_page_shows_the_ping_urls_and_an_admin_can_regenerate_them(sign_in, token, sql):
    client = sign_in("admin")
    [(definition_id,)] = sql("SELECT id FROM job_definitions")
    page = client.get(f"/definitions/{definition_id}").get_data(as_text=True)
    # Crontab lines, complete: the schedule, a cd, and curl's answer kept out of cron's mail.
    curl = "curl -fsS -m 10 --retry 5 -o /dev/null"
    assert f"0 3 * * * cd /path/to/job &amp;&amp; ./job.sh &amp;&amp; {curl} http://localhost/ping/{token}</pre>" in page
    assert f"0 3 * * * cd /path/to/job &amp;&amp; ./job.sh; {curl} http://localhost/ping/{token}/$?</pre>" in page
    assert f"{curl} http://localhost/ping/{token}/start &amp;&amp; ./job.sh &gt; job.log 2&gt;&amp;1; " in page
    assert "0 3 * * * cd /path/to/app &amp;&amp; flask jobs exec backup --timeout 3600 -- ./job.sh" in page
    assert page.count('data-copy="cron-') == 4
    assert "Run now" not in page and "Payload" not in page
    response = client.post(f"/definitions/{definition_id}/ping-token",
                           data={"csrf_token": csrf_token(client, f"/definitions/{definition_id}")})
    assert response.status_code == 302
    [(new_token,)] = sql("SELECT ping_token FROM job_definitions")
    assert new_token != token and len(new_token) >= 32
    assert client.get(f"/ping/{token}").status_code == 404
    assert client.get(f"/ping/{new_token}").status_code == 200
    assert sql("SELECT action FROM jobsweb_audit_log WHERE action <> 'sign_in'") == [("regenerate_ping_token",)]


def test_regenerating_needs_an_admin_and_the_csrf_token(sign_in, token, sql):
    [(definition_id,)] = sql("SELECT id FROM job_definitions")
    client = sign_in("operator")
    assert client.post(f"/definitions/{definition_id}/ping-token",
                       data={"csrf_token": csrf_token(client, "/")}).status_code == 403
    assert client.post(f"/definitions/{definition_id}/ping-token").status_code == 400
    assert sql("SELECT ping_token FROM job_definitions") == [(token,)]


def test_only_the_ping_urls_skip_csrf_and_sign_in(client, token):
    # A POST elsewhere still needs its CSRF token; a page still needs a sign-in.
    assert client.post("/definitions/1/pause").status_code == 400
    assert client.get("/definitions").status_code == 302


def test_pings_work_under_a_host_apps_prefix(app, token, sql):
    from flask import Flask

    from jobsweb import JobsWeb

    host = Flask("host")
    host.config.update(app.config)
    JobsWeb().init_app(host, url_prefix="/admin/jobs")
    host_client = host.test_client()
    assert host_client.post(f"/admin/jobs/ping/{token}/0").status_code == 200
    assert host_client.get(f"/ping/{token}").status_code == 404
    assert runs(sql) == [("succeeded", None, None)]


def test_the_rate_limit_holds_across_gunicorn_processes(token, sql, database_url_for_tests, tmp_path):
    port = free_port()
    env = dict(os.environ, DATABASE_URL=libpq_url(database_url_for_tests), PORT=str(port), WEB_CONCURRENCY="2",
               SECRET_KEY="0123456789abcdef-test-secret-key-0123456789-test")
    log = tmp_path / "gunicorn.log"
    with open(log, "w") as out:
        # The repository's gunicorn.conf.py, with the serving process's pid in each access-log line.
        server = subprocess.Popen([sys.executable, "-m", "gunicorn", "--access-logformat", "%(p)s %(r)s %(s)s",
                                   "wsgi:app"], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        base = f"http://127.0.0.1:{port}"
        wait_for(lambda: get(f"{base}/healthz")[0] == 200, message="gunicorn to answer")
        statuses = []

        def ping():
            # A new connection each time: gunicorn's processes take turns accepting them.
            request = urllib.request.Request(f"{base}/ping/{token}/0", data=b"done", method="POST")
            try:
                with urllib.request.urlopen(request, timeout=10) as response:
                    statuses.append(response.status)
            except urllib.error.HTTPError as exc:
                statuses.append(exc.code)
            refusing = set(re.findall(r"<(\d+)> POST /ping/\S+ HTTP/1.1 429", log.read_text()))
            return len(refusing) == 2

        for _ in range(PING_BURST):
            ping()
        # The burst's runs are dated an hour ahead on the database's clock, so that the window
        # stays open however long a loaded machine takes: no ping may be let through again.
        sql("UPDATE job_runs SET created_at = now() + interval '1 hour'")
        # Past the burst, every process refuses: until both have answered a 429.
        wait_for(ping, timeout=60, interval=0, message="both gunicorn processes to refuse a ping")
        assert statuses[:PING_BURST] == [200] * PING_BURST and set(statuses[PING_BURST:]) == {429}
        assert sql("SELECT count(*) FROM job_runs") == [(PING_BURST,)]
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_the_exec_line_on_the_page_quotes_a_name_the_shell_would_split(sign_in, app, sql):
    with committed(app):
        definitions.define("nightly pg_dump", None, "0 3 * * *", external=True)
    [(definition_id,)] = sql("SELECT id FROM job_definitions")
    page = sign_in("viewer").get(f"/definitions/{definition_id}").get_data(as_text=True)
    assert "flask jobs exec &#39;nightly pg_dump&#39; --timeout" in page
    assert "New ping URL" not in page  # admins only


def test_the_missed_slots_a_start_ping_writes_after_a_long_silence_do_not_count_against_its_end(
        app, client, sql):
    with committed(app):
        definitions.define("every-minute", None, "* * * * *", external=True, grace_seconds=86400)
    [(token,)] = sql("SELECT ping_token FROM job_definitions")
    sql("UPDATE job_definitions SET next_run_at = date_trunc('minute', now()) - interval '10 hours'")
    assert client.get(f"/ping/{token}/start").status_code == 200
    assert sql("SELECT count(*) > 50 FROM job_runs WHERE status = 'missed'") == [(True,)]
    assert client.get(f"/ping/{token}/0").status_code == 200
    assert sql("SELECT status FROM job_runs WHERE status <> 'missed'") == [("succeeded",)]


@pytest.mark.parametrize("role", ["operator", "admin"])
def test_operators_and_admins_see_the_ping_urls(sign_in, token, sql, role):
    client = sign_in(role)
    [(definition_id,)] = sql("SELECT id FROM job_definitions")
    page = client.get(f"/definitions/{definition_id}").get_data(as_text=True)
    assert f"http://localhost/ping/{token}" in page
    assert ("New ping URL" in page) == (role == "admin")


def test_viewers_see_neither_the_ping_urls_nor_the_token(sign_in, token, sql):
    client = sign_in("viewer")
    [(definition_id,)] = sql("SELECT id FROM job_definitions")
    response = client.get(f"/definitions/{definition_id}")
    page = response.get_data(as_text=True)
    assert response.status_code == 200 and "flask jobs exec backup" in page
    assert token not in page and "/ping/" not in page and "curl" not in page and "New ping URL" not in page


def test_viewers_and_operators_cannot_give_a_definition_a_new_ping_url(sign_in, token, sql):
    [(definition_id,)] = sql("SELECT id FROM job_definitions")
    for role in ("viewer", "operator"):
        client = sign_in(role)
        assert client.post(f"/definitions/{definition_id}/ping-token",
                           data={"csrf_token": csrf_token(client, "/")}).status_code == 403
        client.post("/sign-out", data={"csrf_token": csrf_token(client, "/")})
    assert sql("SELECT ping_token FROM job_definitions") == [(token,)]
    assert sql("SELECT count(*) FROM jobsweb_audit_log WHERE action <> 'sign_in'") == [(0,)]


@pytest.mark.parametrize("method", ["GET", "POST"])
@pytest.mark.parametrize("path", ["/ping/{bad}", "/ping/{bad}/start", "/ping/{bad}/fail", "/ping/{bad}/3"])
def test_a_token_outside_the_token_alphabet_is_a_404_before_any_sql(client, token, sql, caplog, method, path):
    for bad in ("%00", f"{token}%00", "%00%0aforged%20line", "%0d%0a", "a%20b", "a.b", "%C3%A9", "~x"):
        response = client.open(path.format(bad=bad), method=method, data=b"hello" if method == "POST" else None)
        assert response.status_code == 404 and response.get_data() == b"", bad
    assert not [r for r in caplog.records if r.levelname in ("ERROR", "CRITICAL")]
    assert runs(sql) == []


def test_the_ping_urls_shown_are_on_the_base_url_whatever_host_the_request_names(app, client, make_user, token, sql):
    app.config["JOBSWEB_BASE_URL"] = "https://jobs.example.com"
    evil = "http://evil.example"  # the Host header a client chose: the whole session is on it
    html = client.get("/sign-in", base_url=evil).get_data(as_text=True)
    token_field = re.search(r'name="csrf-token" content="([^"]+)"', html).group(1)
    assert client.post("/sign-in", base_url=evil, data={"email": make_user("operator"), "password": PASSWORD,
                                                        "csrf_token": token_field}).status_code == 302
    [(definition_id,)] = sql("SELECT id FROM job_definitions")
    page = client.get(f"/definitions/{definition_id}", base_url=evil).get_data(as_text=True)
    assert page.count(f"https://jobs.example.com/ping/{token}") == 4 and "evil.example" not in page
