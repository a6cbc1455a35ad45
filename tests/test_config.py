import pytest

from jobsweb.core.database import database_url
from jobsweb.core.errors import ConfigError
from jobsweb.core.settings import check, from_environment


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
    "JOBSWEB_BASE_URL": None,
    "JOBSWEB_ALERT_INTERVAL": 5.0,                # "seconds between alert evaluations"
    "JOBSWEB_WEB_ALERTS": True,
    "JOBSWEB_NO_WORKER_MINUTES": 5.0,
    "JOBSWEB_LOGIN_URL": None,
    "JOBSWEB_INLINE": False,
}


def test_every_default_is_the_one_the_reference_settings_table_states():
    config = from_environment({})
    assert {name: config[name] for name in DOCUMENTED_DEFAULTS} == DOCUMENTED_DEFAULTS
    # A setting added without a row here (and in the reference's table) fails too.
    assert set(DOCUMENTED_DEFAULTS) == {name for name in config if name.startswith("JOBSWEB_")}
