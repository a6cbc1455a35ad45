"""The web process while the database is away: down, blackholed (a path gone silent) or out of
connection slots. /healthz answers 503 within 2 s, admin pages a short 503 page (no stack
trace, no hang), pings a 503 saying nothing was recorded, and everything works again by itself
once the database is back. The real app under gunicorn where the process matters, each server
kind a private one (tests/private_databases.py) so that it can be stopped or cut off."""

import http.cookiejar
import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

import psycopg
import pytest
from flask import Flask
from flask_sqlalchemy import SQLAlchemy

from jobsweb import JobsWeb, create_app, definitions
from jobsweb.core.database import database_url
from jobsweb.core.deadlines import BoundedConnection
from jobsweb.ops.web_alerts import WebAlerts
from jobsweb.web.accounts import create_user
from tests import servers
from tests.conftest import PASSWORD, ROOT, SECRET_KEY, TEST_SETTINGS, committed, wait_for
from tests.private_databases import migrated, proxy_to
from tests.test_deploy import free_port

# Seconds beyond the same request's with the database there, just before (what a request takes
# this machine at its present load: a loaded one slows every request, not the outage's only).
HEALTH_BOUND = 2.0  # what a load balancer gives a probe
PAGE_BOUND = 10.0  # a page's round trip limit and a connection's timeout, with room
EMAIL = "ops@example.com"


@pytest.fixture(scope="module", params=servers.KINDS)
def server_url(request):
    with migrated(request.param, "web_outage") as (server, url):
        with committed(make_app(url)):
            create_user(EMAIL, PASSWORD, "admin")
            definitions.define("nightly-report", None, "0 3 * * *", external=True)
        yield server, url


def ping_token(url):
    with psycopg.connect(url) as conn:
        return conn.execute("SELECT ping_token FROM job_definitions WHERE name = 'nightly-report'").fetchone()[0]


def make_app(url, **config):
    return create_app({"SQLALCHEMY_DATABASE_URI": database_url(url), "TESTING": True, "SECRET_KEY": SECRET_KEY,
                       **config})


@pytest.fixture
def proxy(server_url):
    p = proxy_to(server_url[1])
    yield p
    p.close()


@pytest.fixture
def gunicorn(tmp_path):
    """gunicorn(url): `gunicorn wsgi:app` (the repository's gunicorn.conf.py, one process) on the
    database at `url`; its base URL once /healthz answers 200. Its log must hold no traceback."""
    started = []

    def start(url):
        port = free_port()
        env = {**os.environ, **TEST_SETTINGS, "DATABASE_URL": url, "SECRET_KEY": SECRET_KEY, "PORT": str(port),
               "WEB_CONCURRENCY": "1"}
        log = open(tmp_path / "gunicorn.log", "w+")
        proc = subprocess.Popen([sys.executable, "-m", "gunicorn", "wsgi:app"], cwd=ROOT, env=env, stdout=log,
                                stderr=subprocess.STDOUT)
        started.append((proc, log))
        base = f"http://127.0.0.1:{port}"
        wait_for(lambda: Browser(base).get("/healthz")[0] == 200, message="gunicorn to answer")
        return base

    yield start
    for proc, log in started:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        log.seek(0)
        assert "Traceback" not in log.read()
        log.close()


class Browser:
    """Requests to `base` with a cookie jar: get(path) and sign_in(); (status, body, seconds)."""

    def __init__(self, base):
        self.base = base
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))

    def get(self, path, data=None):
        began = time.monotonic()
        body = urllib.parse.urlencode(data).encode() if data is not None else None
        try:
            with self.opener.open(self.base + path, data=body, timeout=30) as response:
                status, text = response.status, response.read().decode()
        except urllib.error.HTTPError as exc:
            status, text = exc.code, exc.read().decode()
        except OSError:
            status, text = None, ""
        return status, text, time.monotonic() - began

    def sign_in(self):
        _, html, _ = self.get("/sign-in")
        token = re.search(r'name="csrf-token" content="([^"]+)"', html).group(1)
        status, _, _ = self.get("/sign-in", {"email": EMAIL, "password": PASSWORD, "csrf_token": token})
        assert status == 200  # followed the redirect to the dashboard
        return self


def assert_short_503(status, body, took, before):
    """A short 503 page, within PAGE_BOUND beyond `before` (the same page's seconds, healthy)."""
    assert status == 503, body
    assert "Database unavailable" in body and "Traceback" not in body and "psycopg" not in body
    assert took - before < PAGE_BOUND, f"{took:.2f} s, {before:.2f} s with the database there"


def healthy(browser, path):
    """Seconds `browser` takes to get `path` with the database there (asserted 200)."""
    status, body, took = browser.get(path)
    assert status == 200, body
    return took


def test_during_a_blackhole_healthz_answers_503_within_2_s_pages_a_short_503_and_both_recover_by_themselves(
        server_url, proxy, gunicorn, figures):
    browser = Browser(gunicorn(proxy.url(server_url[1]))).sign_in()
    page_before, probe_before = healthy(browser, "/"), healthy(browser, "/healthz")

    proxy.blackhole = True
    # First the page, on the pooled connection the path went silent under (its pre-ping is cut),
    # then the probe, on a new one (whose connect times out).
    status, body, page = browser.get("/")
    assert_short_503(status, body, page, page_before)
    assert "did not answer in time" in body
    status, body, probe = browser.get("/healthz")
    assert status == 503 and probe - probe_before < HEALTH_BOUND, f"{probe:.2f} s, {probe_before:.2f} s healthy"
    assert json.loads(body) == {"status": "unavailable", "reason": "database"}
    status, body, ping = browser.get(f"/ping/{ping_token(server_url[1])}")
    assert (status, body) == (503, "Not recorded: database did not answer in time. Try again in a moment.\n")
    # Beyond the healthy probe's time: a ping with the database there would be recorded.
    assert ping - probe_before < PAGE_BOUND, f"{ping:.2f} s, healthz {probe_before:.2f} s healthy"

    proxy.blackhole = False
    healed = time.monotonic()
    wait_for(lambda: browser.get("/healthz")[0] == 200, timeout=20, message="healthz to recover")
    wait_for(lambda: browser.get("/")[0] == 200, timeout=20, message="the dashboard to recover")
    figures(dashboard_503_seconds=round(page, 2), healthz_503_seconds=round(probe, 2), ping_503_seconds=round(ping, 2),
            dashboard_200_seconds=round(page_before, 2), healthz_200_seconds=round(probe_before, 2),
            seconds_from_path_back_to_dashboard_200=round(time.monotonic() - healed, 2))


def test_with_the_server_stopped_healthz_and_pages_answer_503_at_once_and_recover_when_it_starts(
        server_url, gunicorn, figures):
    server, url = server_url
    browser = Browser(gunicorn(url)).sign_in()
    probe_before, page_before = healthy(browser, "/healthz"), healthy(browser, "/runs")
    server.stop("immediate")
    try:
        status, body, probe = browser.get("/healthz")
        assert status == 503 and probe - probe_before < HEALTH_BOUND, f"{probe:.2f} s, {probe_before:.2f} s healthy"
        assert json.loads(body)["reason"] == "database"
        status, body, page = browser.get("/runs")
        assert_short_503(status, body, page, page_before)
        # A refused connection needs no timeout.
        assert page - page_before < HEALTH_BOUND, f"{page:.2f} s, {page_before:.2f} s healthy"
    finally:
        server.start()
    started = time.monotonic()
    wait_for(lambda: browser.get("/healthz")[0] == 200, timeout=20, message="healthz to recover")
    assert browser.get("/runs")[0] == 200
    figures(healthz_503_seconds=round(probe, 3), runs_page_503_seconds=round(page, 3),
            healthz_200_seconds=round(probe_before, 3), runs_page_200_seconds=round(page_before, 3),
            seconds_from_start_to_runs_page_200=round(time.monotonic() - started, 2))


def test_a_ping_while_the_server_is_stopped_answers_503_saying_it_was_not_recorded(server_url):
    server, url = server_url
    token = ping_token(url)
    client = make_app(url).test_client()
    server.stop("immediate")
    try:
        response = client.post(f"/ping/{token}", data="some output")
    finally:
        server.start()
    assert response.status_code == 503
    assert response.get_data(as_text=True) == "Not recorded: database unreachable. Try again in a moment.\n"
    assert response.headers["Content-Type"].startswith("text/plain") and response.headers["Retry-After"]
    assert client.get(f"/ping/{token}").status_code == 200


def test_with_every_connection_slot_taken_pages_healthz_and_pings_answer_503_until_one_is_free(serve):
    with migrated("stock", "crowded", {"max_connections": "5"}) as (server, url):
        app = make_app(url)
        with committed(app):
            create_user(EMAIL, PASSWORD, "admin")
            token = definitions.define("crowded-report", None, "0 3 * * *", external=True).ping_token
        browser = Browser(serve(app)).sign_in()
        before = healthy(browser, "/")
        with app.app_context():
            from jobsweb.core.database import db

            db.engine.dispose()  # no pooled connection: the next request must open one
        held = []
        try:
            while True:  # take every slot, as a runaway pool elsewhere would
                held.append(psycopg.connect(url, autocommit=True))
        except psycopg.OperationalError as exc:
            assert "too many clients" in str(exc) or "connection slots are reserved" in str(exc)
        try:
            status, body, took = browser.get("/")
            assert_short_503(status, body, took, before)
            assert "Database has no free connection slot" in body
            status, body, _ = browser.get("/healthz")
            assert status == 503 and json.loads(body)["reason"] == "database"
            status, body, _ = browser.get(f"/ping/{token}")
            assert (status, body) == (503, "Not recorded: database has no free connection slot. Try again in a moment.\n")
        finally:
            for conn in held:
                conn.close()
        assert browser.get("/")[0] == 200 and browser.get("/healthz")[0] == 200


def test_inside_a_team_app_its_engine_is_left_alone_and_only_jobsweb_pages_answer_503(server_url):
    server, url = server_url
    host = Flask("team")
    host.config.update(SQLALCHEMY_DATABASE_URI=database_url(url), SECRET_KEY=SECRET_KEY, TESTING=True)
    team_db = SQLAlchemy(host)

    @host.get("/orders")
    def orders():
        return str(team_db.session.execute(team_db.text("SELECT 1")).scalar())

    JobsWeb(host, url_prefix="/jobs", authorize=lambda: ("ann", "admin"))
    with host.app_context():
        raw = team_db.engine.raw_connection()
        assert type(raw.driver_connection) is psycopg.Connection  # not jobsweb's BoundedConnection
        assert not isinstance(raw.driver_connection, BoundedConnection)
        raw.close()
        team_db.engine.dispose()
    client = host.test_client()
    server.stop("immediate")
    try:
        page = client.get("/jobs/runs")
        host.testing = False  # the team's own error, as its users would get it
        host.config["PROPAGATE_EXCEPTIONS"] = False
        own = client.get("/orders")
    finally:
        server.start()
    assert page.status_code == 503 and "Database unavailable" in page.get_data(as_text=True)
    assert own.status_code == 500  # the team's error handling, untouched by jobsweb's


def test_the_web_alert_thread_backs_off_while_the_database_refuses_and_resumes_by_itself(
        server_url, proxy, caplog):
    app = make_app(proxy.url(server_url[1]), JOBSWEB_ALERT_INTERVAL=0.2)
    caplog.set_level(logging.INFO, logger="jobsweb.alerts")
    # The thread's own lines, whatever logging configuration an earlier test of the same process
    # left behind (in the whole suite none reached the root's capture: a dictConfig or Alembic
    # fileConfig disables the loggers that exist when it runs).
    logger = logging.getLogger("jobsweb.alerts")
    logger.disabled, logger.propagate = False, False
    logger.addHandler(caplog.handler)
    proxy.refuse = True
    proxy.reset()
    began = time.monotonic()
    alerts = WebAlerts(app).start()
    try:
        tries = lambda: [r for r in caplog.records if "database unavailable" in r.getMessage()]  # noqa: E731
        wait_for(lambda: len(tries()) >= 4, timeout=20, message="four tries")
        lines = tries()
        took = time.monotonic() - began
        waits = [float(re.search(r"next try in ([\d.]+)s", r.getMessage()).group(1)) for r in lines]
        assert waits[:4] == [0.4, 0.8, 1.6, 3.2]  # each wait twice the last: one line per step
        assert len(lines) <= 30 * took / 60 + 4
        for earlier, later, wait in zip(lines, lines[1:], waits):
            assert later.created - earlier.created >= wait - 0.05

        proxy.refuse = False
        wait_for(lambda: any("available again" in r.getMessage() for r in caplog.records), timeout=20,
                 message="the thread to resume")
    finally:
        alerts.stop()
        logger.removeHandler(caplog.handler)
        logger.propagate = True
