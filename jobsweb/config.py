"""Settings: defaults, then the environment, then test overrides; a bad value stops start-up."""

import os

import click


class ConfigError(click.ClickException):
    """A setting has a value jobsweb cannot use; the message names the variable.

    A ClickException, so that any `flask` command prints it as one line and exits 1.
    """


def _positive(convert, what):
    """A parser for numbers above zero; `what` says in words what the variable must be."""

    def parse(name, raw):
        try:
            value = convert(raw)
        except ValueError:
            raise ConfigError(f"{name} must be {what}, got {raw!r}") from None
        if value <= 0:
            raise ConfigError(f"{name} must be greater than 0, got {raw!r}")
        return value

    return parse


_positive_float = _positive(float, "a number of seconds")
_positive_int = _positive(int, "a whole number")


def _optional_seconds(name, raw):
    """An empty value or 0 means "no limit"."""
    if raw in ("", "0", "none", "None"):
        return None
    return _positive_float(name, raw)


def _flag(name, raw):
    """on/off: 1, true, yes, on or 0, false, no, off (any case)."""
    value = str(raw).strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"{name} must be on or off (1/0, true/false, yes/no), got {raw!r}")


def _module_list(name, raw):
    return [part.strip() for part in raw.split(",") if part.strip()]


def _word_list(name, raw):
    return [part.strip().lower() for part in raw.split(",") if part.strip()]


# name -> (default, parser). Every JOBSWEB_* variable the app reads is listed here.
SETTINGS = {
    "JOBSWEB_HANDLERS": ([], _module_list),
    "JOBSWEB_MAX_PAYLOAD_BYTES": (64 * 1024, _positive_int),
    "JOBSWEB_MAX_ATTEMPTS": (5, _positive_int),
    "JOBSWEB_LEASE_SECONDS": (60.0, _positive_float),
    "JOBSWEB_CONCURRENCY": (4, _positive_int),
    "JOBSWEB_POLL_INTERVAL": (5.0, _positive_float),
    # A --forever worker LISTENs for enqueued runs and starts them at once; off: polling only.
    "JOBSWEB_LISTEN": (True, _flag),
    "JOBSWEB_SHUTDOWN_TIMEOUT": (10.0, _positive_float),
    "JOBSWEB_BACKOFF_BASE": (10.0, _positive_float),
    "JOBSWEB_BACKOFF_CAP": (3600.0, _positive_float),
    "JOBSWEB_DEFAULT_TIMEOUT": (None, _optional_seconds),
    "JOBSWEB_ERROR_MAX_CHARS": (2000, _positive_int),
    "JOBSWEB_STACK_MAX_CHARS": (20000, _positive_int),
    # Runs per transaction when the admin retries or cancels everything matching a filter.
    "JOBSWEB_BULK_BATCH": (1000, _positive_int),
    # Payload keys containing any of these words are masked on every admin page.
    "JOBSWEB_MASK_KEYS": (["password", "passwd", "token", "secret", "api_key", "apikey"], _word_list),
}


def database_url(raw):
    """Normalise a DATABASE_URL to the psycopg 3 driver SQLAlchemy should use."""
    if raw.startswith("postgres://"):
        raw = "postgresql://" + raw[len("postgres://"):]
    if raw.startswith("postgresql://"):
        return "postgresql+psycopg://" + raw[len("postgresql://"):]
    if raw.startswith("postgresql+psycopg://"):
        return raw
    raise ConfigError(
        "DATABASE_URL must be a PostgreSQL URL (postgresql://user:password@host:5432/dbname), "
        f"got one starting with {raw.split(':', 1)[0]!r}"
    )


def from_environment(environ=None):
    """Read every setting from the environment, raising ConfigError on the first bad one."""
    environ = os.environ if environ is None else environ
    config = {}
    for name, (default, parse) in SETTINGS.items():
        raw = environ.get(name)
        config[name] = default if raw is None else parse(name, raw.strip())
    if environ.get("DATABASE_URL"):
        config["SQLALCHEMY_DATABASE_URI"] = database_url(environ["DATABASE_URL"].strip())
    if environ.get("SECRET_KEY"):
        config["SECRET_KEY"] = environ["SECRET_KEY"]
    return config


def check(config):
    """Cross-setting rules that no single variable can enforce."""
    if config["JOBSWEB_BACKOFF_CAP"] < config["JOBSWEB_BACKOFF_BASE"]:
        raise ConfigError("JOBSWEB_BACKOFF_CAP must be at least JOBSWEB_BACKOFF_BASE")
