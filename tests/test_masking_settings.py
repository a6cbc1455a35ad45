"""The mask settings and secrets in settings errors (issue 53, item 5): an empty
JOBSWEB_MASK_KEYS, which silently turned masking off, stops start-up; a bad setting's error never
quotes a secret (a bad JOBSWEB_ALERT_WEBHOOK_URL was echoed whole, password included)."""

import pytest

from jobsweb.app import create_app
from jobsweb.core.errors import ConfigError
from jobsweb.core.settings import from_environment


@pytest.mark.parametrize("raw", ["", " , ", ","])
def test_an_empty_list_of_mask_words_stops_start_up_naming_the_setting(raw):
    with pytest.raises(ConfigError) as refused:
        from_environment({"JOBSWEB_MASK_KEYS": raw})
    assert refused.value.message.startswith("JOBSWEB_MASK_KEYS is empty, which would show every secret")


def test_an_empty_list_of_mask_words_in_the_apps_config_stops_it_too():
    with pytest.raises(ConfigError, match="JOBSWEB_MASK_KEYS is empty"):
        create_app({"JOBSWEB_MASK_KEYS": [], "SQLALCHEMY_DATABASE_URI": "postgresql://localhost/x",
                    "SECRET_KEY": "k" * 32})


def test_mask_words_are_kept_with_hyphens_read_as_underscores():
    assert from_environment({"JOBSWEB_MASK_KEYS": "Api-Key, PASSWORD,x-auth-token"})["JOBSWEB_MASK_KEYS"] == [
        "api_key", "password", "x_auth_token"]


@pytest.mark.parametrize("name, raw, secrets", [
    ("JOBSWEB_ALERT_WEBHOOK_URL", "ftp://hooks:Sup3rS3cret@hooks.example.com/T0/B1/xyzpath", ["Sup3rS3cret", "xyzpath"]),
    ("JOBSWEB_ALERT_WEBHOOK_URL", "hooks.slack.com/services/T0/B1/xyzpath", ["xyzpath"]),
    ("JOBSWEB_BASE_URL", "jobs.example.com/?token=abc123", ["abc123"]),
    ("JOBSWEB_METRICS_TOKEN", "short-s3cr3t", ["short-s3cr3t"]),
    ("JOBSWEB_LOG_FORMAT", "json token=abc123", ["abc123"]),
])
def test_a_bad_settings_error_names_it_and_quotes_no_secret(name, raw, secrets):
    with pytest.raises(ConfigError) as refused:
        from_environment({name: raw})
    assert refused.value.message.startswith(name)
    assert [secret for secret in secrets if secret in refused.value.message] == []


def test_a_bad_value_holding_no_secret_is_still_quoted():
    with pytest.raises(ConfigError) as refused:
        from_environment({"JOBSWEB_SMTP_PORT": "smtp"})
    assert refused.value.message == "JOBSWEB_SMTP_PORT must be a whole number, got 'smtp'"


def test_a_bad_url_in_the_apps_config_is_not_quoted_either():
    from jobsweb.core.settings import resolve

    with pytest.raises(ConfigError) as refused:
        resolve({"JOBSWEB_ALERT_WEBHOOK_URL": "ftp://hooks:Sup3rS3cret@hooks.example.com/x"}, environ={})
    assert refused.value.message.startswith("JOBSWEB_ALERT_WEBHOOK_URL must be an http")
    assert "Sup3rS3cret" not in refused.value.message
