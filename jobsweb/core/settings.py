"""Settings: defaults, then the environment, then the app's config; a bad value stops start-up,
and so does a JOBSWEB_* name that is no setting (a typo would otherwise leave its setting at
the default without a word).

Inside a team's app, `app.config["JOBSWEB_..."]` wins over the environment (resolve); the
standalone app reads the environment alone (from_environment).
"""

import difflib
import os

from .database import check_database_url, database_url
from .errors import ConfigError, InvalidInput, check_emails, check_url
from .masking import MASK_WORDS, fold, is_secret, masked


def _positive(convert, what):
    """A parser for numbers above zero; `what` says in words what the variable must be."""

    def parse(name, raw):
        try:
            value = convert(raw)
        except ValueError:
            raise ConfigError(f"{name} must be {what}, got {raw!r}") from None
        if not value > 0:
            raise ConfigError(f"{name} must be greater than 0, got {raw!r}")
        if convert is float and not value <= MAX_SECONDS:
            raise ConfigError(f"{name} must be at most {MAX_SECONDS:g} seconds (7 days), got {raw!r}")
        return value

    return parse


_positive_float = _positive(float, "a number of seconds")
_positive_int = _positive(int, "a whole number")
# Runs one worker process holds at once (--concurrency too). Each sync handler is a thread, and
# Linux's default pid_max is 32,768 threads for the whole machine; past 2**31 the claim's
# integer parameters failed in psycopg with a traceback. A thousand async runs is the documented
# large case: ten times that is room, not a target.
MAX_CONCURRENCY = 10_000


def _concurrency(name, raw):
    value = _positive_int(name, raw)
    if value > MAX_CONCURRENCY:
        raise ConfigError(f"{name} must be at most {MAX_CONCURRENCY}, got {raw!r}")
    return value
# float() reads "inf" and "1e300": a delay must also be finite and at most this (7 days).
MAX_SECONDS = 7 * 86400.0


def _optional_seconds(name, raw):
    """An empty value or 0 means "no limit"."""
    if raw in ("", "0", "none", "None"):
        return None
    return _positive_float(name, raw)


def _whole(what):
    """A parser for whole numbers from 0; `what` names the unit and what 0 means."""

    def parse(name, raw):
        if not raw.isascii() or not raw.isdigit():
            raise ConfigError(f"{name} must be a whole number of {what}, got {raw!r}")
        return int(raw)

    return parse


_days = _whole("days (0 keeps forever)")
_hops = _whole("proxies (0 trusts no forwarded header)")


def _token(name, raw):
    """A bearer token: empty means unset; a short one is refused, since it guards the endpoint."""
    if raw == "":
        return None
    if len(raw) < 16:
        raise ConfigError(f"{name} must be at least 16 characters long (e.g. from `openssl rand -hex 32`)")
    return raw


def _choice(*choices):
    def parse(name, raw):
        if raw.lower() not in choices:
            raise ConfigError(f"{name} must be one of {', '.join(choices)}, got {raw!r}")
        return raw.lower()

    return parse


def _module_list(name, raw):
    return [part.strip() for part in raw.split(",") if part.strip()]


def _word_list(name, raw):
    return [part.strip().lower() for part in raw.split(",") if part.strip()]


def _mask_words(name, raw):
    """The mask words (core/masking.py): at least one, since none would show every payload's
    secrets (URL passwords stay masked). Compared with `-` read as `_`."""
    words = [fold(word) for word in _word_list(name, raw)]
    if not words:
        raise ConfigError(f"{name} is empty, which would show every secret in payloads and errors: list the "
                          f"words whose keys are masked (unset, it is {','.join(MASK_WORDS)})")
    return words


def _checked(check):
    """A parser from one of the input checks, whose InvalidInput becomes a ConfigError."""

    def parse(name, raw):
        try:
            return check(name, raw)
        except InvalidInput as exc:
            raise ConfigError(f"{name} {exc.message}") from None

    return parse


_url = _checked(check_url)
_emails = _checked(check_emails)


def _login_url(name, raw):
    """A path on the host (/login) or an http(s) URL; empty means none."""
    if raw == "" or raw.startswith("/") and not raw.startswith("//") and not any(c.isspace() for c in raw):
        return raw or None
    return _url(name, raw)


def _direct_url(name, raw):
    """A PostgreSQL URL that reaches the server itself, not through a pooler; empty means none."""
    if raw == "":
        return None
    url = database_url(raw)
    check_database_url(name, url, postgresql=True)
    return url


def _minutes(name, raw):
    """A number of minutes above zero and at most a week (fractions allowed: 0.5 is 30 s)."""
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a number of minutes, got {raw!r}") from None
    if not 0 < value <= MAX_SECONDS / 60:
        raise ConfigError(f"{name} must be greater than 0 and at most {MAX_SECONDS / 60:g} minutes (7 days), "
                          f"got {raw!r}")
    return value


def _optional_text(name, raw):
    return raw or None


def _boolean(name, raw):
    words = {"1": True, "true": True, "yes": True, "on": True,
             "0": False, "false": False, "no": False, "off": False}
    if raw.lower() not in words:
        raise ConfigError(f"{name} must be true or false, got {raw!r}")
    return words[raw.lower()]


def _port(name, raw):
    value = _positive_int(name, raw)
    if value > 65535:
        raise ConfigError(f"{name} must be a port number (1-65535), got {raw!r}")
    return value


def _email(name, raw):
    return _emails(name, raw)[0] if raw else None


def _names(name, raw):
    return [part.strip() for part in raw.split(",") if part.strip()]


# name -> (default, parser). Every JOBSWEB_* variable the app reads is listed here.
SETTINGS = {
    "JOBSWEB_HANDLERS": ([], _module_list),
    "JOBSWEB_MAX_PAYLOAD_BYTES": (64 * 1024, _positive_int),
    "JOBSWEB_MAX_ATTEMPTS": (5, _positive_int),
    "JOBSWEB_LEASE_SECONDS": (60.0, _positive_float),
    "JOBSWEB_CONCURRENCY": (4, _concurrency),
    "JOBSWEB_POLL_INTERVAL": (5.0, _positive_float),
    # A --forever worker LISTENs for enqueued runs and starts them at once; off: polling only.
    "JOBSWEB_LISTEN": (True, _boolean),
    # When DATABASE_URL goes through a pooler in transaction mode (PgBouncer, most PaaS
    # "pooled" URLs): a direct URL for what needs one server session, LISTEN and migrations.
    "JOBSWEB_DIRECT_DATABASE_URL": (None, _direct_url),
    "JOBSWEB_SHUTDOWN_TIMEOUT": (10.0, _positive_float),
    "JOBSWEB_BACKOFF_BASE": (10.0, _positive_float),
    "JOBSWEB_BACKOFF_CAP": (3600.0, _positive_float),
    "JOBSWEB_DEFAULT_TIMEOUT": (None, _optional_seconds),
    "JOBSWEB_ERROR_MAX_CHARS": (2000, _positive_int),
    "JOBSWEB_STACK_MAX_CHARS": (20000, _positive_int),
    # Runs per transaction when the admin retries or cancels everything matching a filter.
    "JOBSWEB_BULK_BATCH": (1000, _positive_int),
    # Keys containing any of these words (any case, `-` as `_`) have their values masked
    # wherever jobsweb shows or sends them (docs/MASKING.md). A substring match on purpose:
    # "auth" also masks "author", and showing a secret costs more than hiding a name.
    "JOBSWEB_MASK_KEYS": (list(MASK_WORDS), _mask_words),
    # GET /metrics answers only with `Authorization: Bearer <this>`; unset, /metrics is a 404.
    "JOBSWEB_METRICS_TOKEN": (None, _token),
    # text: one readable line per event; json: one JSON object per line, for log pipelines.
    "JOBSWEB_LOG_FORMAT": ("text", _choice("text", "json")),
    # info: one line per finished attempt; debug adds a line as each run starts.
    "JOBSWEB_LOG_LEVEL": ("info", _choice("debug", "info", "warning", "error")),
    # Reverse proxies (a PaaS router, a load balancer) in front of the app whose
    # X-Forwarded-For/-Proto/-Host headers are trusted; 0 trusts none.
    "JOBSWEB_PROXY_HOPS": (0, _hops),
    # Days the jobsweb.prune job keeps finished runs (and their attempts), by status; 0 keeps
    # them forever. `failed` runs are still to be retried and are never pruned.
    "JOBSWEB_RETAIN_SUCCEEDED": (14, _days),
    "JOBSWEB_RETAIN_DEAD": (90, _days),
    "JOBSWEB_RETAIN_CANCELLED": (30, _days),
    "JOBSWEB_RETAIN_SKIPPED": (14, _days),
    "JOBSWEB_RETAIN_MISSED": (30, _days),
    # What JOBSWEB_RETAIN_* count: days, or seconds for a benchmark or test that needs retention
    # to delete while it runs (make bench's soak keeps succeeded runs 120 seconds).
    "JOBSWEB_RETAIN_UNIT": ("days", _choice("days", "seconds")),
    # Runs deleted per transaction by the prune job: small, so no lock is held for long.
    "JOBSWEB_PRUNE_BATCH": (500, _positive_int),
    # Alerts (ops/alerts.py, ops/notify.py): where notifications go unless a definition names its own.
    "JOBSWEB_ALERT_WEBHOOK_URL": (None, _url),
    "JOBSWEB_ALERT_EMAIL_TO": ([], _emails),
    "JOBSWEB_ALERT_TIMEOUT": (10.0, _positive_float),  # seconds per HTTP request or SMTP session
    "JOBSWEB_ALERT_MAX_ATTEMPTS": (10, _positive_int),  # sends of one notification before giving up
    "JOBSWEB_ALERT_RETRY_BASE": (30.0, _positive_float),  # seconds; doubles per failure, capped at 1 h
    # Seconds between two alert evaluations in one process (a worker's, or a web process's).
    "JOBSWEB_ALERT_INTERVAL": (5.0, _positive_float),
    # Each web process evaluates alerts too, on a thread of its own, so they fire with no worker
    # running at all (ops/web_alerts.py); false leaves alerting to the workers.
    "JOBSWEB_WEB_ALERTS": (True, _boolean),
    # Tests of a host app on SQLite (jobsweb.testing, README "Testing"): enqueue checks its input,
    # then runs the handler at once in the caller's app context, storing nothing in the database.
    "JOBSWEB_INLINE": (False, _boolean),
    # Runs are due and no worker was seen for this many minutes: a 'no_worker' incident.
    "JOBSWEB_NO_WORKER_MINUTES": (5.0, _minutes),
    # Characters of an attempt's output kept (its tail): a handler's log records, a command's
    # stdout and stderr under `flask jobs exec`, a ping's body.
    "JOBSWEB_OUTPUT_MAX_CHARS": (10_000, _positive_int),
    # Seconds `flask jobs exec` waits for its run's start to be recorded before it starts the
    # command anyway (without the overlap check): short, as cron's command must not wait on a
    # silent database; longer for a database far away (each connection's TLS and sign-in).
    "JOBSWEB_EXEC_START_WAIT": (0.5, _positive_float),
    # Links in notifications point here (e.g. https://jobs.example.com); none without it.
    "JOBSWEB_BASE_URL": (None, _url),
    # Inside a team's app with `authorize`: where a person who is not signed in is sent (with
    # ?next=); without it, such a person gets a 401.
    "JOBSWEB_LOGIN_URL": (None, _login_url),
    "JOBSWEB_SMTP_HOST": (None, _optional_text),
    "JOBSWEB_SMTP_PORT": (587, _port),
    "JOBSWEB_SMTP_USER": (None, _optional_text),
    "JOBSWEB_SMTP_PASSWORD": (None, _optional_text),
    "JOBSWEB_SMTP_FROM": ("jobsweb@localhost", _email),
    "JOBSWEB_SMTP_STARTTLS": (True, _boolean),
    # Webhooks to loopback, private, link-local, multicast or reserved addresses are refused
    # (the cloud metadata service is one) unless this is true, for receivers on a private network.
    "JOBSWEB_ALERT_ALLOW_PRIVATE_IPS": (False, _boolean),
    # Bytes a request to the admin screen may send; larger ones get a 413 before being read.
    "JOBSWEB_MAX_REQUEST_BYTES": (1024 * 1024, _positive_int),
    # Seconds without a request after which a signed-in session of jobsweb's own users ends.
    "JOBSWEB_SESSION_IDLE_SECONDS": (12 * 3600, _positive_int),
    # JOBSWEB_* names that are not settings but must not stop start-up: a newer jobsweb's setting
    # read by this older one, or a name of the team's own. Names, not a switch: every other typo
    # is still caught.
    "JOBSWEB_IGNORE_UNKNOWN_SETTINGS": ([], _names),
}

PREFIX = "JOBSWEB_"
# Names people write with the prefix by mistake: jobsweb reads them without it.
_UNPREFIXED = ("DATABASE_URL", "SECRET_KEY")


def _closest(name):
    """The setting `name` was probably meant to be, or None. Compared without the shared prefix,
    which would otherwise make every JOBSWEB_ name look close to every other."""
    rest = name.upper().removeprefix(PREFIX)
    if rest in _UNPREFIXED:
        return rest
    close = difflib.get_close_matches(rest, [known.removeprefix(PREFIX) for known in SETTINGS], n=1)
    return PREFIX + close[0] if close else None


def _refuse_unknown(names, where, ignored):
    """ConfigError naming each JOBSWEB_* name in `names` that is no setting (nor in `ignored`),
    where it was set, and the setting it is closest to."""
    unknown = sorted(name for name in names if name.upper().startswith(PREFIX)
                     and name not in SETTINGS and name not in ignored)
    if not unknown:
        return
    problems = []
    for name in unknown:
        closest = _closest(name)
        problems.append(f"{name}, set {where}, is not a jobsweb setting" + (f"; did you mean {closest}?" if closest else "."))
    raise ConfigError(" ".join(problems) + " A name jobsweb should let pass (a newer release's setting, a name of "
                      "your own) goes in JOBSWEB_IGNORE_UNKNOWN_SETTINGS, comma-separated.")


def from_environment(environ=None):
    """Read every setting from the environment, raising ConfigError on the first bad one, or
    naming every JOBSWEB_* variable that is no setting."""
    environ = os.environ if environ is None else environ
    config = _read_environment(environ)
    _refuse_unknown(environ, "in the environment", config["JOBSWEB_IGNORE_UNKNOWN_SETTINGS"])
    return config


def _parsed(name, parse, raw):
    """parse(name, raw), its ConfigError never quoting a secret: a setting named for one (a
    password, a token), or a URL (a webhook's path is its secret), is not quoted at all, any
    other with its secrets masked (a URL's password, key=value)."""
    try:
        return parse(name, raw)
    except ConfigError as exc:
        quoted, secret_name = repr(raw), "URL" in name or is_secret(name, MASK_WORDS)
        if quoted not in exc.message or not secret_name and masked(raw, MASK_WORDS) == raw:
            raise
        hidden = "a value not shown here (it may hold a secret)" if secret_name else repr(masked(raw, MASK_WORDS))
        raise ConfigError(exc.message.replace(quoted, hidden)) from None


def _read_environment(environ):
    config = {}
    for name, (default, parse) in SETTINGS.items():
        raw = environ.get(name)
        config[name] = default if raw is None else _parsed(name, parse, raw.strip())
    if environ.get("DATABASE_URL"):
        # Checked here, before any app exists: gunicorn's settings file reads the environment.
        url = database_url(environ["DATABASE_URL"].strip())
        check_database_url("DATABASE_URL", url)
        config["SQLALCHEMY_DATABASE_URI"] = url
    if environ.get("SECRET_KEY"):
        config["SECRET_KEY"] = environ["SECRET_KEY"]
    return config


SECRET_KEY_MIN_CHARS = 32


def check_secret_key(value):
    """A SECRET_KEY long enough that its sessions and CSRF tokens cannot be guessed."""
    if not isinstance(value, (str, bytes)) or len(value) < SECRET_KEY_MIN_CHARS:
        raise ConfigError(f"SECRET_KEY must be at least {SECRET_KEY_MIN_CHARS} characters long "
                          "(e.g. from `openssl rand -hex 32`)")
    return value


def resolve(app_config, environ=None):
    """Every setting for an app: its config's value where it sets one (text is read as the
    environment's is; numbers, booleans and lists are checked the same way), else the
    environment's, else the default. Also the database URL and secret key from the environment
    when the app sets none. JOBSWEB_IGNORE_UNKNOWN_SETTINGS in the environment lets names pass
    in both; in the app's config, in the app's config only (the environment is read, and
    checked, before any app exists: by gunicorn's settings file, by the standalone app)."""
    environ = os.environ if environ is None else environ
    config = from_environment(environ)
    ignored = config["JOBSWEB_IGNORE_UNKNOWN_SETTINGS"]
    for name, (default, parse) in SETTINGS.items():
        value = app_config.get(name)
        if value is None:
            continue
        if isinstance(value, bool):
            value = "true" if value else "false"
        elif isinstance(value, (list, tuple)):
            value = ",".join(str(item) for item in value)
        config[name] = _parsed(name, parse, str(value).strip())
    _refuse_unknown(app_config, "in the app's config", [*ignored, *config["JOBSWEB_IGNORE_UNKNOWN_SETTINGS"]])
    for name in ("SQLALCHEMY_DATABASE_URI", "SECRET_KEY"):
        if app_config.get(name):
            config.pop(name, None)
    return config


def check(config):
    """Cross-setting rules that no single variable can enforce."""
    if config["JOBSWEB_BACKOFF_CAP"] < config["JOBSWEB_BACKOFF_BASE"]:
        raise ConfigError("JOBSWEB_BACKOFF_CAP must be at least JOBSWEB_BACKOFF_BASE")
    if config["JOBSWEB_ALERT_EMAIL_TO"] and not config["JOBSWEB_SMTP_HOST"]:
        raise ConfigError("JOBSWEB_ALERT_EMAIL_TO needs JOBSWEB_SMTP_HOST (the server that sends the email)")
    if not config["JOBSWEB_SMTP_FROM"]:
        raise ConfigError("JOBSWEB_SMTP_FROM must be an email address")
