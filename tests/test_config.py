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
