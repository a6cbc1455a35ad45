"""Errors a person can act on, and the checks that raise them: each names the field that is wrong."""

import unicodedata
from ipaddress import ip_address
from urllib.parse import urlsplit

import click

EMAIL_MAX_CHARS = 254
BIGINT_MAX = 2**63 - 1  # ids are PostgreSQL bigints: a larger number can name no row
INT_MAX = 2**31 - 1  # a PostgreSQL integer column: a larger value is an error there (a 500)
# A job type name is a key of btree indexes (job_paused_types' primary key among them), whose
# entries can be at most ~2,700 bytes: 500 characters of up to 4 bytes each fit, and no real
# job type comes near.
JOB_TYPE_MAX_CHARS = 500
# Control characters other than tab, newline and carriage return: PostgreSQL text cannot hold
# NUL, and the others forge log lines or hide text on a page.
_CONTROL = {chr(c) for c in range(32)} - {"\t", "\n", "\r"} | {"\x7f"}
# Refused in names too, which are what people recognise things by: C1 controls (terminals act on
# them) and the bidirectional embeddings, overrides and isolates, which show text reordered
# ("evil\u202etxt.exe" reads as "evilexe.txt").
_HIDDEN = ({chr(c) for c in range(0x80, 0xA0)} | {chr(c) for c in range(0x202A, 0x202F)}
           | {chr(c) for c in range(0x2066, 0x206A)})


class InvalidInput(ValueError):
    """Input that jobsweb refuses before writing anything; `field` names what to fix."""

    def __init__(self, field, message):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class RunNotFound(InvalidInput):
    """cancel(), retry() or wait() was given the id of no run (never enqueued, not committed yet,
    or deleted: by an operator or by retention, also while it was being waited for)."""

    def __init__(self, run_id, message=None):
        super().__init__("run_id", message or f"there is no run {run_id}")
        self.run_id = run_id


class RunStateError(InvalidInput):
    """cancel() or retry() of a run its status does not allow (the admin screen's rules): a
    succeeded run is not cancelled, a queued one not retried. `status`: the run's, as it was read."""

    def __init__(self, run_id, status, message):
        super().__init__("run_id", message)
        self.run_id = run_id
        self.status = status


class ConfigError(click.ClickException):
    """A setting has a value jobsweb cannot use; the message names the variable.

    A ClickException, so that any `flask` command prints it as one line and exits 1.
    """


def clean_text(field, value, multiline=False):
    """Text from a form, query string or the command line, or InvalidInput naming `field`: no
    NUL or other control character, and no line break unless `multiline` (a payload, a note)."""
    if value is None:
        return None
    refused = _CONTROL if multiline else _CONTROL | {"\n", "\r"}
    bad = next((c for c in value if c in refused), None)
    if bad is not None:
        raise InvalidInput(field, f"must not contain the control character {bad!r}")
    # Bytes that are not UTF-8 on the command line reach Python as lone surrogates, which no
    # UTF-8 (nor PostgreSQL) holds: psycopg's UnicodeEncodeError was a traceback.
    if not value.isascii() and any("\ud800" <= c <= "\udfff" for c in value):
        raise InvalidInput(field, "must be UTF-8 text: it holds bytes that are not (read as lone surrogates)")
    return value


def clean_name(field, value):
    """A name (of a definition, a job type, a user), or InvalidInput naming `field`: what
    clean_text refuses on one line, and C1 controls and bidirectional overrides as well."""
    clean_text(field, value)
    bad = next((c for c in value if c in _HIDDEN), None)
    if bad is not None:
        what = unicodedata.name(bad, "a C1 control character")
        raise InvalidInput(field, f"must not contain U+{ord(bad):04X} ({what}), which hides or reorders text")
    return value


def whole_number(field, raw, maximum=BIGINT_MAX):
    """A whole number from 0 written in ASCII digits (so "²", which str.isdigit() accepts, is
    refused), at most `maximum`; InvalidInput naming `field` otherwise."""
    raw = raw.strip()
    if not raw or not raw.isascii() or not raw.isdigit() or len(raw) > 19 or int(raw) > maximum:
        raise InvalidInput(field, f"must be a whole number from 0 to {maximum}, got {raw!r}")
    return int(raw)


def fits_integer(field, raw):
    """`raw` (text or int) unchanged, or InvalidInput naming `field` if it is a whole number past
    INT_MAX (what else is wrong with it is for the field's own check to say)."""
    digits = str(raw).strip().lstrip("+")
    if digits.isascii() and digits.isdigit() and (len(digits) > 10 or int(digits) > INT_MAX):
        shown = digits if len(digits) <= 20 else f"{digits[:20]}… ({len(digits)} digits)"
        raise InvalidInput(field, f"must be a whole number from 1 to {INT_MAX}, got {shown}")
    return raw


def check_job_type_name(field, name):
    """A job type's name as typed (pause-type, the Queues page), or InvalidInput naming `field`
    when it is longer than any index holds: PostgreSQL refused an 8 KB one with an error, a 500."""
    if isinstance(name, str) and len(name) > JOB_TYPE_MAX_CHARS:
        raise InvalidInput(field, f"must be at most {JOB_TYPE_MAX_CHARS} characters, got {len(name)}")
    return clean_name(field, name) if isinstance(name, str) else name


def has_nul(value):
    """True if a JSON-able value holds U+0000 anywhere: PostgreSQL text and jsonb cannot store it."""
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(has_nul(k) or has_nul(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return any(has_nul(v) for v in value)
    return False


def check_url(field, raw):
    """An http(s) URL with a host, or InvalidInput naming `field`. Empty means none."""
    if raw == "":
        return None
    clean_text(field, raw)
    try:
        # urlsplit raises ValueError for an unclosed [IPv6] host ("http://[::1"), .port for a
        # port past 65535, ip_address for a bracketed host that is no address ("[nope]"): each
        # was a 500 on the definition form, or later in the webhook sender.
        parts = urlsplit(raw)
        hostname, _ = parts.hostname, parts.port
        if "[" in parts.netloc:
            ip_address(hostname or "")
    except ValueError:
        parts = hostname = None
    if parts is None or parts.scheme not in ("http", "https") or not hostname or any(c.isspace() for c in raw):
        raise InvalidInput(field, f"must be an http:// or https:// URL, got {raw!r}")
    return raw


def check_emails(field, raw):
    """Comma-separated email addresses as a list, or InvalidInput naming `field`."""
    emails = [part.strip() for part in clean_text(field, raw).split(",") if part.strip()]
    for email in emails:
        # No spaces or line breaks: a recipient must never add headers to a message.
        if email.count("@") != 1 or any(c.isspace() or c in "<>,;" for c in email) or len(email) > EMAIL_MAX_CHARS:
            raise InvalidInput(field, f"must be comma-separated email addresses, got {email!r}")
    return emails
