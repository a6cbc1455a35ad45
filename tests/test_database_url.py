"""A bad DATABASE_URL (or a host app's SQLALCHEMY_DATABASE_URI) stops jobsweb as people start it,
each a process of its own: `flask jobs ...`, `flask run-jobs`, gunicorn serving wsgi:app, and a
host app's JobsWeb().init_app, with exit code 1 and one line naming the setting and what is wrong.
Before, a URL SQLAlchemy could not parse was a 41-line traceback, and one whose driver is not
installed (mysql://) a traceback followed by "No such command 'jobs'"."""

import os
import subprocess

import pytest

from tests.conftest import EVENT_TIMEOUT, ROOT, SECRET_KEY, TEST_SETTINGS
from tests.forkserver import python_m

EXPECTED_URL = "expected postgresql://user:password@host:5432/dbname"
NOT_POSTGRESQL = "jobsweb needs PostgreSQL, but DATABASE_URL is {!r}: set it to postgresql://user:password@host:5432/dbname"
# DATABASE_URLs as people have got them wrong, each with the one line that refuses it. Their
# password, secretpw, is never shown: masked where the URL could be read, the URL not shown where not.
BAD_DATABASE_URLS = {
    "postgres//u:secretpw@db/app": "DATABASE_URL is not a database URL (it lacks '://' after the database's name): "
                                   + EXPECTED_URL,
    "u:secretpw@db:5432/app": "DATABASE_URL is not a database URL (it lacks '://' after the database's name): "
                              + EXPECTED_URL,
    "://u:secretpw@db/app": "DATABASE_URL is not a database URL (it lacks a database name before '://'): " + EXPECTED_URL,
    "postgresql://u:secretpw@db:5432x/app": "DATABASE_URL has a port that is not a number: " + EXPECTED_URL,
    "postgresql://u:secretpw@db:99999/app": "DATABASE_URL has port 99999, which is no port number (1-65535): "
                                            + EXPECTED_URL,
    "mysql://u:secretpw@db/app": NOT_POSTGRESQL.format("mysql://u:***@db/app"),
    "mysql+pymysql://u:secretpw@db/app": NOT_POSTGRESQL.format("mysql+pymysql://u:***@db/app"),
    "http://u:secretpw@db/app": NOT_POSTGRESQL.format("http://u:***@db/app"),
    "sqlite:///app.db": NOT_POSTGRESQL.format("sqlite:///app.db"),
    "postgresql+asyncpg://u:secretpw@db/app": "DATABASE_URL is 'postgresql+asyncpg://u:***@db/app', whose driver "
                                              "asyncpg is not installed: write postgresql:// (for psycopg, which "
                                              "jobsweb installs)",
}
# How people start jobsweb: (module, arguments, what the line starts with). gunicorn's settings
# file (./gunicorn.conf.py) stops it before any app is loaded, with the bare message.
STARTS = {
    "flask jobs": ("flask", ["--app", "wsgi", "jobs", "schedules"], "Error: "),
    "flask run-jobs": ("flask", ["--app", "wsgi", "run-jobs"], "Error: "),
    "gunicorn": ("gunicorn", ["--bind", "127.0.0.1:0", "wsgi:app"], ""),
}


def refused(module, args, env, cwd=ROOT):
    """(exit code, stdout, stderr) of `python -m module args`, which must stop of itself: a
    server that started serving instead is killed after EVENT_TIMEOUT and fails the test."""
    proc = python_m(module, args, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        stdout, stderr = proc.communicate(timeout=EVENT_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, stderr = proc.communicate()
        pytest.fail(f"`{module} {' '.join(args)}` did not stop: {stderr[-2000:]}")
    return proc.returncode, stdout, stderr


def without_a_database(**variables):
    env = {key: value for key, value in os.environ.items() if key != "DATABASE_URL"}
    return {**env, **TEST_SETTINGS, "SECRET_KEY": SECRET_KEY, **variables}


@pytest.mark.parametrize("start", STARTS)
@pytest.mark.parametrize("url", BAD_DATABASE_URLS)
def test_every_bad_database_url_stops_each_way_of_starting_jobsweb_with_one_line_naming_it(url, start):
    module, args, prefix = STARTS[start]
    code, stdout, stderr = refused(module, args, without_a_database(DATABASE_URL=url))
    assert (code, stdout, stderr) == (1, "", prefix + BAD_DATABASE_URLS[url] + "\n")


@pytest.mark.parametrize("setting", ["SQLALCHEMY_DATABASE_URI", "DATABASE_URL"])
@pytest.mark.parametrize("url", [url for url in BAD_DATABASE_URLS if not url.startswith("sqlite")])
def test_every_bad_database_url_of_a_host_app_stops_init_app_with_one_line_naming_it(tmp_path, url, setting):
    """In the app's config or, where the app sets none, the environment's DATABASE_URL. (sqlite://
    passes init_app, for a host's own tests: test_host_app has its commands' refusal.)"""
    (tmp_path / "host.py").write_text(
        "import os\nfrom flask import Flask\nfrom jobsweb import JobsWeb\n\n"
        "def create_app():\n"
        "    app = Flask(__name__)\n"
        "    app.config['SECRET_KEY'] = os.environ['SECRET_KEY']\n"
        "    if 'HOST_DATABASE_URI' in os.environ:\n"
        "        app.config['SQLALCHEMY_DATABASE_URI'] = os.environ['HOST_DATABASE_URI']\n"
        "    JobsWeb().init_app(app)\n"
        "    return app\n")
    given = {"HOST_DATABASE_URI" if setting == "SQLALCHEMY_DATABASE_URI" else "DATABASE_URL": url}
    code, stdout, stderr = refused("flask", ["--app", "host", "jobs", "schedules"], without_a_database(**given),
                                   cwd=tmp_path)
    expected = BAD_DATABASE_URLS[url].replace("DATABASE_URL", setting)
    assert (code, stdout, stderr) == (1, "", "Error: " + expected + "\n")
