import re
import subprocess
import sys
from pathlib import Path

import pytest
from flask import Flask

from jobsweb import JobsWeb
from jobsweb.core.database import database_url
from jobsweb.core.errors import ConfigError
from jobsweb.core.logs import gunicorn_logging
from jobsweb.core.settings import SETTINGS, check, from_environment, resolve
from tests.conftest import ROOT, SECRET_KEY


@pytest.mark.parametrize("raw, expected", [
    ("postgres://u:p@db:5432/app", "postgresql+psycopg://u:p@db:5432/app"),
    ("postgresql://u:p@db/app", "postgresql+psycopg://u:p@db/app"),
    ("postgresql+psycopg://u@db/app", "postgresql+psycopg://u@db/app"),
    ("postgresql+psycopg2://u@db/app", "postgresql+psycopg2://u@db/app"),
])
def test_it_accepts_both_postgres_url_spellings(raw, expected):
    assert database_url(raw) == expected


def test_a_non_postgres_url_is_passed_on_for_the_host_and_refused_by_jobswebs_own_parts_only():
    assert database_url("sqlite:///app.db") == "sqlite:///app.db"
    assert from_environment({"DATABASE_URL": "sqlite:///app.db"})["SQLALCHEMY_DATABASE_URI"] == "sqlite:///app.db"


@pytest.mark.parametrize("name, value, message", [
    ("JOBSWEB_CONCURRENCY", "four", "JOBSWEB_CONCURRENCY must be a whole number"),
    ("JOBSWEB_CONCURRENCY", "0", "JOBSWEB_CONCURRENCY must be greater than 0"),
    ("JOBSWEB_LEASE_SECONDS", "-1", "JOBSWEB_LEASE_SECONDS must be greater than 0"),
    ("JOBSWEB_POLL_INTERVAL", "soon", "JOBSWEB_POLL_INTERVAL must be a number of seconds"),
    ("JOBSWEB_RETAIN_UNIT", "minutes", "JOBSWEB_RETAIN_UNIT must be one of days, seconds, got 'minutes'"),
])
def test_a_bad_setting_stops_start_up_naming_the_variable(name, value, message):
    with pytest.raises(ConfigError, match=message):
        from_environment({name: value})


def test_settings_come_from_the_environment_with_defaults():
    config = from_environment({"JOBSWEB_CONCURRENCY": "8", "JOBSWEB_HANDLERS": "app.jobs, app.more",
                               "JOBSWEB_DEFAULT_TIMEOUT": "0", "DATABASE_URL": "postgres://h/db"})
    assert config["JOBSWEB_CONCURRENCY"] == 8
    assert config["JOBSWEB_HANDLERS"] == ["app.jobs", "app.more"]
    assert config["JOBSWEB_DEFAULT_TIMEOUT"] is None
    assert config["JOBSWEB_LEASE_SECONDS"] == 60.0
    assert config["SQLALCHEMY_DATABASE_URI"] == "postgresql+psycopg://h/db"


def test_a_cap_below_the_base_is_refused():
    with pytest.raises(ConfigError, match="JOBSWEB_BACKOFF_CAP"):
        check(from_environment({"JOBSWEB_BACKOFF_BASE": "60", "JOBSWEB_BACKOFF_CAP": "10"}))


def test_an_unimportable_handlers_module_stops_start_up(database_url_for_tests, monkeypatch):
    from jobsweb import create_app

    monkeypatch.setenv("JOBSWEB_HANDLERS", "no_such_module_here")
    with pytest.raises(ConfigError, match="JOBSWEB_HANDLERS names 'no_such_module_here'"):
        create_app({"SQLALCHEMY_DATABASE_URI": database_url_for_tests, "SECRET_KEY": "0123456789abcdef-test-secret-key-0123456789-x"})


# The Settings table of docs/REFERENCE.md, row by row: each default as it states it, a literal
# here, so a changed default fails this test until the reference (and this table) says the new value.
DOCUMENTED_DEFAULTS = {
    "JOBSWEB_HANDLERS": [],
    "JOBSWEB_CONCURRENCY": 4,
    "JOBSWEB_POLL_INTERVAL": 5.0,                 # "seconds between polls with --forever"
    "JOBSWEB_DIRECT_DATABASE_URL": None,
    "JOBSWEB_LISTEN": True,
    "JOBSWEB_LEASE_SECONDS": 60.0,
    "JOBSWEB_SHUTDOWN_TIMEOUT": 10.0,             # "seconds running jobs get after SIGTERM"
    "JOBSWEB_MAX_ATTEMPTS": 5,
    "JOBSWEB_BACKOFF_BASE": 10.0,                 # "10 / 3600"
    "JOBSWEB_BACKOFF_CAP": 3600.0,
    "JOBSWEB_DEFAULT_TIMEOUT": None,
    "JOBSWEB_MAX_PAYLOAD_BYTES": 65536,
    "JOBSWEB_ERROR_MAX_CHARS": 2000,
    "JOBSWEB_STACK_MAX_CHARS": 20000,
    "JOBSWEB_BULK_BATCH": 1000,
    "JOBSWEB_MASK_KEYS": ["password", "passwd", "passphrase", "pwd", "token", "secret", "api_key", "apikey",
                          "access_key", "accesskey", "auth", "bearer", "signature", "credential", "private_key",
                          "dsn", "cookie", "session"],
    "JOBSWEB_METRICS_TOKEN": None,
    "JOBSWEB_LOG_FORMAT": "text",
    "JOBSWEB_LOG_LEVEL": "info",
    "JOBSWEB_PROXY_HOPS": 0,
    "JOBSWEB_RETAIN_SUCCEEDED": 14,
    "JOBSWEB_RETAIN_DEAD": 90,
    "JOBSWEB_RETAIN_CANCELLED": 30,
    "JOBSWEB_RETAIN_SKIPPED": 14,
    "JOBSWEB_RETAIN_MISSED": 30,
    "JOBSWEB_RETAIN_UNIT": "days",
    "JOBSWEB_PRUNE_BATCH": 500,
    "JOBSWEB_ALERT_WEBHOOK_URL": None,
    "JOBSWEB_ALERT_EMAIL_TO": [],
    "JOBSWEB_SMTP_HOST": None,
    "JOBSWEB_SMTP_PORT": 587,
    "JOBSWEB_SMTP_USER": None,
    "JOBSWEB_SMTP_PASSWORD": None,
    "JOBSWEB_SMTP_FROM": "jobsweb@localhost",
    "JOBSWEB_SMTP_STARTTLS": True,
    "JOBSWEB_ALERT_TIMEOUT": 10.0,
    "JOBSWEB_ALERT_ALLOW_PRIVATE_IPS": False,
    "JOBSWEB_MAX_REQUEST_BYTES": 1048576,
    "JOBSWEB_SESSION_IDLE_SECONDS": 43200,        # "a session unused this long ends (12 h)"
    "JOBSWEB_ALERT_MAX_ATTEMPTS": 10,
    "JOBSWEB_ALERT_RETRY_BASE": 30.0,
    "JOBSWEB_OUTPUT_MAX_CHARS": 10000,
    "JOBSWEB_EXEC_START_WAIT": 0.5,
    "JOBSWEB_BASE_URL": None,
    "JOBSWEB_ALERT_INTERVAL": 5.0,                # "seconds between alert evaluations"
    "JOBSWEB_WEB_ALERTS": True,
    "JOBSWEB_NO_WORKER_MINUTES": 5.0,
    "JOBSWEB_LOGIN_URL": None,
    "JOBSWEB_INLINE": False,
    "JOBSWEB_IGNORE_UNKNOWN_SETTINGS": [],
}


def test_every_default_is_the_one_the_reference_settings_table_states():
    config = from_environment({})
    assert {name: config[name] for name in DOCUMENTED_DEFAULTS} == DOCUMENTED_DEFAULTS
    # A setting added without a row here (and in the reference's table) fails too.
    assert set(DOCUMENTED_DEFAULTS) == {name for name in config if name.startswith("JOBSWEB_")}


HATCH = ("A name jobsweb should let pass (a newer release's setting, a name of your own) goes in "
         "JOBSWEB_IGNORE_UNKNOWN_SETTINGS, comma-separated.")


def host_app(**config):
    app = Flask("host")
    app.config.update({"SQLALCHEMY_DATABASE_URI": "postgresql://u:p@127.0.0.1:9/never_reached",
                       "SECRET_KEY": SECRET_KEY, **config})
    return app


def test_a_typo_in_the_apps_config_stops_init_app_naming_it_where_it_was_set_and_the_setting_meant():
    with pytest.raises(ConfigError) as caught:
        JobsWeb().init_app(host_app(JOBSWEB_RETAIN_SUCCEDED=3), url_prefix="/jobs")
    assert caught.value.message == ("JOBSWEB_RETAIN_SUCCEDED, set in the app's config, is not a jobsweb setting; "
                                    "did you mean JOBSWEB_RETAIN_SUCCEEDED? " + HATCH)


def test_a_typo_in_the_environment_stops_start_up_and_gunicorns_settings_file_with_one_line():
    expected = ("JOBSWEB_RETAIN_SUCCEDED, set in the environment, is not a jobsweb setting; "
                "did you mean JOBSWEB_RETAIN_SUCCEEDED? " + HATCH)
    with pytest.raises(ConfigError) as caught:
        from_environment({"JOBSWEB_RETAIN_SUCCEDED": "3"})
    assert caught.value.message == expected
    with pytest.raises(ConfigError) as caught:  # inside a host app the environment is checked too
        resolve({}, {"JOBSWEB_RETAIN_SUCCEDED": "3"})
    assert caught.value.message == expected
    with pytest.raises(SystemExit) as stopped:  # jobsweb's gunicorn settings read it before any app exists
        gunicorn_logging({"JOBSWEB_RETAIN_SUCCEDED": "3"})
    assert stopped.value.code == expected


def test_a_typo_in_the_environment_stops_flask_run_jobs_with_one_line_and_exit_code_1(spawn_worker):
    worker = spawn_worker(JOBSWEB_CONCURENCY="8")
    output, _ = worker.communicate(timeout=120)
    assert (worker.returncode, output) == (1, "Error: JOBSWEB_CONCURENCY, set in the environment, is not a jobsweb "
                                              "setting; did you mean JOBSWEB_CONCURRENCY? " + HATCH + "\n")


def test_a_typo_in_a_host_apps_config_stops_its_flask_commands_with_one_line(tmp_path, spawn_worker):
    (tmp_path / "host.py").write_text(
        "from flask import Flask\nfrom jobsweb import JobsWeb\n\n"
        "def create_app():\n"
        "    app = Flask(__name__)\n"
        "    app.config['JOBSWEB_POLL_INTERVALL'] = 1\n"
        "    JobsWeb(app)\n"
        "    return app\n")
    result = subprocess.run([sys.executable, "-m", "flask", "--app", "host", "run-jobs"], cwd=tmp_path,
                            env=spawn_worker.env(), capture_output=True, text=True, timeout=120)
    assert (result.returncode, result.stdout, result.stderr) == (
        1, "", "Error: JOBSWEB_POLL_INTERVALL, set in the app's config, is not a jobsweb setting; "
               "did you mean JOBSWEB_POLL_INTERVAL? " + HATCH + "\n")


def test_a_host_app_without_a_secret_key_long_enough_stops_its_flask_commands_with_one_line(tmp_path, spawn_worker):
    """README's hello.py set none, and its admin screen's sign-in page was a 500 (CSRF needs one)."""
    (tmp_path / "hello.py").write_text("from flask import Flask\nfrom jobsweb import JobsWeb\n\n"
                                       "app = Flask(__name__)\nJobsWeb(app)\n")
    env = {name: value for name, value in spawn_worker.env().items() if name not in ("SECRET_KEY", "JOBSWEB_HANDLERS")}

    def run_jobs(**more):
        done = subprocess.run([sys.executable, "-m", "flask", "--app", "hello", "run-jobs"], cwd=tmp_path,
                              env={**env, **more}, capture_output=True, text=True, timeout=120)
        return done.returncode, done.stdout, done.stderr

    assert run_jobs() == (1, "", "Error: SECRET_KEY is not set: jobsweb signs its sessions and CSRF tokens with it. "
                                 "Set it in the app's config or the environment, 32+ characters (e.g. from "
                                 "`openssl rand -hex 32`)\n")
    assert run_jobs(SECRET_KEY="x" * 31) == (
        1, "", "Error: SECRET_KEY must be at least 32 characters long (e.g. from `openssl rand -hex 32`)\n")
    code, _, output = run_jobs(SECRET_KEY="x" * 32)
    assert code == 0, output


def test_a_test_apps_short_secret_key_is_let_pass_and_no_key_is_not(monkeypatch):
    monkeypatch.delenv("SECRET_KEY", raising=False)
    JobsWeb().init_app(host_app(SECRET_KEY="test", TESTING=True), url_prefix="/jobs")  # guards nothing
    with pytest.raises(ConfigError, match=r"^SECRET_KEY is not set: "):
        JobsWeb().init_app(host_app(SECRET_KEY=None, TESTING=True), url_prefix="/jobs")


@pytest.mark.parametrize("name, closest", [
    ("JOBSWEB_RETAIN_SUCCEDED", "JOBSWEB_RETAIN_SUCCEEDED"),
    ("JOBSWEB_MAX_ATTEMPT", "JOBSWEB_MAX_ATTEMPTS"),
    ("JOBSWEB_SMTP_PASS", "JOBSWEB_SMTP_PASSWORD"),
    ("jobsweb_concurrency", "JOBSWEB_CONCURRENCY"),  # jobsweb reads upper case only
    ("JOBSWEB_DATABASE_URL", "DATABASE_URL"),  # read without the prefix
    ("JOBSWEB_SECRET_KEY", "SECRET_KEY"),
])
def test_an_unknown_name_is_told_the_setting_it_is_closest_to(name, closest):
    with pytest.raises(ConfigError) as caught:
        from_environment({name: "1"})
    assert caught.value.message.startswith(f"{name}, set in the environment, is not a jobsweb setting; "
                                           f"did you mean {closest}? ")


@pytest.mark.parametrize("name", ["JOBSWEB_FROBNICATE", "JOBSWEB_X", "JOBSWEB_SENTRY_DSN"])
def test_a_name_like_no_setting_is_refused_without_a_suggestion(name):
    with pytest.raises(ConfigError) as caught:
        from_environment({name: "1"})
    assert caught.value.message == f"{name}, set in the environment, is not a jobsweb setting. " + HATCH


def test_every_unknown_name_is_named_in_one_message_in_order():
    with pytest.raises(ConfigError) as caught:
        resolve({"JOBSWEB_ZZZ": 1, "JOBSWEB_CONCURENCY": 2}, {})
    assert caught.value.message == (
        "JOBSWEB_CONCURENCY, set in the app's config, is not a jobsweb setting; did you mean JOBSWEB_CONCURRENCY? "
        "JOBSWEB_ZZZ, set in the app's config, is not a jobsweb setting. " + HATCH)


def test_names_listed_in_jobsweb_ignore_unknown_settings_pass_and_every_other_typo_is_still_caught():
    newer = {"JOBSWEB_SOME_NEWER_SETTING": "1", "JOBSWEB_TEAM_FLAG": "on"}
    hatch = {"JOBSWEB_IGNORE_UNKNOWN_SETTINGS": " JOBSWEB_SOME_NEWER_SETTING, JOBSWEB_TEAM_FLAG "}
    config = from_environment({**newer, **hatch, "JOBSWEB_CONCURRENCY": "8"})
    assert config["JOBSWEB_CONCURRENCY"] == 8
    assert config["JOBSWEB_IGNORE_UNKNOWN_SETTINGS"] == ["JOBSWEB_SOME_NEWER_SETTING", "JOBSWEB_TEAM_FLAG"]
    assert "JOBSWEB_TEAM_FLAG" not in config  # let pass, not read
    with pytest.raises(ConfigError, match=r"^JOBSWEB_CONCURENCY, set in the environment, is not a jobsweb setting"):
        from_environment({**newer, **hatch, "JOBSWEB_CONCURENCY": "8"})
    # In the app's config, as a list, for the app's config; the environment's list covers both.
    assert resolve({**newer, "JOBSWEB_IGNORE_UNKNOWN_SETTINGS": list(newer)}, {})["JOBSWEB_CONCURRENCY"] == 4
    assert resolve(newer, hatch)["JOBSWEB_CONCURRENCY"] == 4
    assert resolve({**newer, "JOBSWEB_IGNORE_UNKNOWN_SETTINGS": "JOBSWEB_TEAM_FLAG"},
                   {"JOBSWEB_IGNORE_UNKNOWN_SETTINGS": "JOBSWEB_SOME_NEWER_SETTING"})["JOBSWEB_CONCURRENCY"] == 4
    JobsWeb().init_app(host_app(**newer, JOBSWEB_IGNORE_UNKNOWN_SETTINGS=list(newer)), url_prefix="/jobs")
    # The environment is checked before any app exists (gunicorn's settings file), so the app's
    # list does not cover it.
    with pytest.raises(ConfigError, match=r"^JOBSWEB_SOME_NEWER_SETTING, set in the environment, is not a"):
        resolve({"JOBSWEB_IGNORE_UNKNOWN_SETTINGS": list(newer)}, newer)


def test_every_jobsweb_name_the_repository_writes_is_a_setting():
    # Its own tools' knobs (which server the tests use, the lifecycle model's) are TEST_*: make
    # test sets them for every process it starts, and a JOBSWEB_ name that is no setting would
    # stop each of them at start-up. A new one fails here, naming it.
    files = [ROOT / "Makefile", ROOT / "Procfile", ROOT / "pyproject.toml", *ROOT.glob("*.py")]
    for folder in ("tests", "bench", "drills", ".ci", "examples", "jobsweb"):
        files += [file for file in (ROOT / folder).rglob("*")
                  if file.suffix in (".py", ".sh", ".toml", ".cfg", ".yml", ".yaml", "")]
    used = set()
    for path in files:
        if path.is_file() and path != Path(__file__).resolve() and "__pycache__" not in path.parts:
            used |= {name for name in re.findall(r"JOBSWEB_[A-Z0-9_]+", path.read_text(errors="replace"))
                     if not name.endswith("_")}  # JOBSWEB_RETAIN_* in comments
    assert "JOBSWEB_CONCURRENCY" in used
    assert used - set(SETTINGS) == set()
