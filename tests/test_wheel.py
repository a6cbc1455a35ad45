"""Packaging: the wheel built from this checkout is the whole of jobsweb.

Built and installed into a fresh virtualenv (its dependencies from the package index) by uv
(tests/deployment.py, once per pytest process: the conftest fixture installed_wheel), and
run from an empty directory, so nothing of the checkout can stand in for a missing file. uv, not
pip: the same build backend and the same wheel, in a fraction of the CPU (pip's build and install
took 37 CPU-seconds of the suite's); README's `pip wheel` line is a test of its own
(tests/docs/test_readme.py).
"""

import http.cookiejar
import os
import re
import subprocess
import urllib.error
import urllib.parse
import urllib.request

import psycopg
import pytest

from jobsweb.core.database import libpq_url
from tests.conftest import wait_for
from tests.deployment import files_in_wheel, files_the_wheel_must_hold, free_port

pytestmark = pytest.mark.slow  # builds a wheel and installs it with its dependencies

PASSWORD = "wheel-test-password"
# Every page of the admin screen, as a signed-in admin sees it ({run} and {definition}: ids).
PAGES = ["/", "/runs", "/runs/{run}", "/definitions", "/definitions/new", "/definitions/{definition}",
         "/definitions/{definition}/edit", "/enqueue", "/workers", "/queues", "/incidents", "/users",
         "/definitions?kind=external", "/definitions/{external}", "/audit"]


@pytest.fixture(scope="module")
def installed(installed_wheel):
    """A virtualenv with the wheel of this checkout installed: its bin/ folder."""
    return installed_wheel[1]


def test_the_wheel_holds_every_module_template_static_file_and_migration_of_the_checkout(installed_wheel):
    wheel, _ = installed_wheel
    held, wanted = files_in_wheel(wheel), files_the_wheel_must_hold()
    assert sorted(wanted - held) == [] and sorted(held - wanted) == []
    # What the comparison stands on: the folders the wheel maps, and the one subpackage an
    # install once lacked (the suite, importing the checkout, could not tell).
    assert {"jobsweb/integrations/sentry.py", "jobsweb/integrations/otel.py", "jobsweb/templates/base.html",
            "jobsweb/static/app.css", "jobsweb/migrations/alembic.ini"} <= held


def test_the_installed_integrations_import_from_an_empty_directory(installed, tmp_path):
    imported = subprocess.run([installed / "python", "-c", "import jobsweb.integrations.sentry, "
                               "jobsweb.integrations.otel as o; print(o.__file__)"],
                              cwd=tmp_path, env={"PATH": os.environ["PATH"]}, capture_output=True, text=True)
    assert imported.returncode == 0, imported.stderr
    assert imported.stdout.startswith(str(installed.parent)), imported.stdout


def test_the_wheel_migrates_enqueues_runs_and_serves_every_page_from_an_empty_directory(
        installed, scratch_database, tmp_path):
    empty = tmp_path / "elsewhere"
    empty.mkdir()
    url = scratch_database("jobsweb_wheel", revision=None)
    # Nothing of the checkout on the path: no PYTHONPATH, no FLASK_APP, no JOBSWEB_HANDLERS.
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("JOBSWEB_", "FLASK_", "PYTHON"))}
    env.update(DATABASE_URL=libpq_url(url), SECRET_KEY="0123456789abcdef-test-secret-key-0123456789-wheel-test")

    def flask(*args):
        result = subprocess.run([installed / "flask", "--app", "jobsweb", *args], cwd=empty, env=env,
                                capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stdout + result.stderr
        return result.stdout

    where = subprocess.run([installed / "python", "-c", "import jobsweb; print(jobsweb.__file__)"], cwd=empty,
                           env=env, capture_output=True, text=True, check=True).stdout
    assert where.startswith(str(installed.parent)), where

    assert "up to date" in flask("jobs", "migrate")
    run_id = int(flask("jobs", "enqueue", "jobsweb.noop"))
    flask("run-jobs")
    flask("jobs", "define", "nightly", "--type", "jobsweb.noop", "--schedule", "0 3 * * *")
    flask("users", "create", "admin@example.com", "--role", "admin", "--password", PASSWORD)
    flask("jobs", "define", "backup", "--schedule", "0 3 * * *", "--external")
    flask("jobs", "exec", "backup", "--", "true")

    with psycopg.connect(libpq_url(url)) as conn:
        assert conn.execute("SELECT status FROM job_runs WHERE id = %s", [run_id]).fetchone() == ("succeeded",)
        [definition_id] = conn.execute("SELECT id FROM job_definitions WHERE name = 'nightly'").fetchone()
        external_id, ping_token = conn.execute("SELECT id, ping_token FROM job_definitions WHERE name = 'backup'").fetchone()

    port = free_port()
    # jobsweb's gunicorn settings come in the wheel (what a host app serving jobsweb uses).
    web = subprocess.Popen([installed / "gunicorn", "-c", "python:jobsweb.gunicorn_conf", "--bind", f"127.0.0.1:{port}",
                            "--workers", "1", "jobsweb:create_app()"], cwd=empty, env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _status(f"{base}/healthz") == 200, timeout=60, message="gunicorn to serve /healthz")
        browser = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
        sign_in_page = browser.open(f"{base}/sign-in").read().decode()
        token = re.search(r'name="csrf-token" content="([^"]+)"', sign_in_page).group(1)
        form = urllib.parse.urlencode({"email": "admin@example.com", "password": PASSWORD, "csrf_token": token})
        assert browser.open(f"{base}/sign-in", data=form.encode()).geturl() == f"{base}/"

        assets = set()
        for page in PAGES:
            path = page.format(run=run_id, definition=definition_id, external=external_id)
            response = browser.open(base + path)
            html = response.read().decode()
            assert response.status == 200, path
            assert "<title>" in html and "Sign out" in html, path  # base.html around the page
            assets.update(re.findall(r'(?:href|src)="(/(?:static|vendor)/[^"?]+)', html))
        assert any(a.endswith(".css") for a in assets) and any("htmx" in a for a in assets), assets
        for asset in assets:
            body = browser.open(base + asset).read()
            assert len(body) > 100, asset
        # A script's ping, without a session.
        ping = urllib.request.Request(f"{base}/ping/{ping_token}/0", data=b"done", method="POST")
        assert urllib.request.urlopen(ping, timeout=10).read() == b"OK\n"
        with psycopg.connect(libpq_url(url)) as conn:
            assert conn.execute("SELECT status, count(*) FROM job_runs WHERE definition_id = %s GROUP BY status",
                                [external_id]).fetchall() == [("succeeded", 2)]
    finally:
        web.terminate()
        web.wait(timeout=30)


def _status(url):
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status
    except (urllib.error.URLError, OSError):
        return None


def test_the_wheel_carries_the_bsd_3_clause_licence_and_says_so_in_its_metadata(installed, tmp_path):
    # From an empty directory: the checkout's own jobsweb.egg-info must not answer for the wheel.
    shown = subprocess.run([installed / "python", "-c", "import importlib.metadata as m\n"
                            "d = m.distribution('jobsweb')\n"
                            "print(d.metadata.get_all('Classifier'))\n"
                            "[licence] = [f for f in d.files if f.name == 'LICENSE']\n"
                            "print(licence.read_text().splitlines()[0])\n"
                            "print('Neither the name of the copyright holder' in licence.read_text())"],
                           capture_output=True, text=True, cwd=tmp_path).stdout.splitlines()
    assert shown == ["['License :: OSI Approved :: BSD License']", "Copyright 2026 the jobsweb authors", "True"]
