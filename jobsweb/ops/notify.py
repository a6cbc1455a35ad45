"""Sending notifications: where they go (routes), the jobsweb_alert_deliveries outbox, a webhook channel
and an email channel.

A delivery row is written in the transaction that opened or resolved its incident (alerts.py)
or by the admin's "send test alert". Workers claim due rows one at a time (SKIP LOCKED, so
two workers never send the same one at once), send outside any transaction with a timeout,
and record the outcome guarded by the attempt number. A failed send is retried with backoff
(JOBSWEB_ALERT_RETRY_BASE, doubling, capped at an hour) until JOBSWEB_ALERT_MAX_ATTEMPTS,
then marked failed; every error stays visible on the incidents page.

A claim pushes next_attempt_at out by the send lease instead of holding a lock across the
send: a worker that dies mid-send leaves the row to be claimed again once the lease passes.
So a notification can arrive twice (sent, then the worker died before recording it), never
zero times while attempts remain.
"""

import json
import logging
import smtplib
import ssl
import traceback
from email.message import EmailMessage
from urllib.parse import urlsplit

from flask import current_app, url_for

from ..core.database import db, execute
from ..core.masking import shown
from ..core.models import AlertDelivery
from ..engine.jobs import retry
from . import webhook

log = logging.getLogger("jobsweb.notify")

RETRY_CAP = 3600.0  # seconds: the longest wait between two tries of one notification
ERROR_CHARS = 500  # of a receiver's answer, kept as last_error
SMTP_SSL_PORT = 465  # implicit TLS; any other port uses STARTTLS when JOBSWEB_SMTP_STARTTLS

# Uses index jobsweb_alert_deliveries_due.
ANY_DUE = "SELECT EXISTS (SELECT 1 FROM jobsweb_alert_deliveries WHERE status = 'pending' AND next_attempt_at <= now())"

# Claim the most overdue delivery. SKIP LOCKED: a row another worker is claiming right now
# is left to it. The claim is committed before sending; next_attempt_at moves past the send
# lease, so no other worker takes the row while this one is sending. `tried`: the rows this
# pass has tried already; a short retry delay must not turn one pass into a retry loop.
# Uses index jobsweb_alert_deliveries_due. The one row is picked once (MATERIALIZED): as a
# subquery in FROM, with statistics of a table analysed at one row, the planner scanned the
# deliveries and ran the subquery again for each, which then skipped the rows this statement had
# just claimed and took the next: one claim took every due delivery, sent the first, and left
# the others to wait out their lease (found by make test, embedded server).
CLAIM_DELIVERY = """
WITH due AS MATERIALIZED (
    SELECT id FROM jobsweb_alert_deliveries
    WHERE status = 'pending' AND next_attempt_at <= now() AND NOT (id = ANY(%(tried)s))
    ORDER BY next_attempt_at, id
    LIMIT 1
    FOR UPDATE SKIP LOCKED
)
UPDATE jobsweb_alert_deliveries d
SET attempts = d.attempts + 1, next_attempt_at = now() + make_interval(secs => %(lease)s)
FROM due
WHERE d.id = due.id
RETURNING d.id, d.attempts, d.channel, d.target, d.subject, d.body, d.data
"""

# Record a send. Guarded by the attempt: if this worker's lease ran out and another worker
# claimed the row again, the older attempt's outcome is not written over the newer one.
DELIVERY_SENT = """
UPDATE jobsweb_alert_deliveries SET status = 'sent', sent_at = now()
WHERE id = %(id)s AND attempts = %(attempt)s AND status = 'pending'
"""

DELIVERY_FAILED = """
UPDATE jobsweb_alert_deliveries
SET last_error = %(error)s,
    status = CASE WHEN attempts >= %(max_attempts)s THEN 'failed' ELSE 'pending' END,
    next_attempt_at = now() + make_interval(secs => %(delay)s)
WHERE id = %(id)s AND attempts = %(attempt)s AND status = 'pending'
"""


class SendError(Exception):
    """The receiver refused or could not be reached; the message says what happened."""


def send_lease(config):
    """Seconds a claim keeps other workers off a delivery: longer than any one send."""
    return max(60.0, 6 * config["JOBSWEB_ALERT_TIMEOUT"])


def any_due():
    """Whether a delivery is waiting to be sent."""
    return bool(execute(ANY_DUE).scalar())


def deliver_due(stop=None, limit=100):
    """Send due deliveries one by one until none is due, `stop` is set or `limit` were tried;
    each at most once per call. Returns how many were sent.
    """
    config = current_app.config
    sent = 0
    tried = []
    for _ in range(limit):
        if stop is not None and stop.is_set():
            break
        row = execute(CLAIM_DELIVERY, {"lease": send_lease(config), "tried": tried}).first()
        db.session.commit()
        if row is None:
            break
        tried.append(row.id)
        try:
            send(row.channel, row.target, row.subject, row.body, row.data, config)
        except Exception as exc:
            # Any exception, not only SendError: one unforeseen (a URL http.client cannot encode)
            # left the row pending with no error, and a traceback every pass for ever.
            error = str(exc) if isinstance(exc, SendError) else f"{type(exc).__name__}: {exc}"
            # Shown on the incidents page and logged (the traceback of the unforeseen too): without
            # the webhook's secret path and what the masking rule hides (a reply may quote them).
            error, stack = (_masked(text, row.target, config) for text in (
                error, "" if isinstance(exc, SendError) else "\n" + "".join(traceback.format_exception(exc))))
            error = error[:ERROR_CHARS]
            delay = retry.backoff_seconds(row.attempts, config["JOBSWEB_ALERT_RETRY_BASE"], RETRY_CAP)
            changed = execute(DELIVERY_FAILED, {
                "id": row.id, "attempt": row.attempts, "error": error, "delay": delay,
                "max_attempts": config["JOBSWEB_ALERT_MAX_ATTEMPTS"]}).rowcount
            # The traceback only of the unforeseen; the retry's backoff spaces even those out.
            log.warning("alert delivery %d (%s) failed, attempt %d: %s%s", row.id, row.channel, row.attempts, error,
                        stack)
        else:
            changed = execute(DELIVERY_SENT, {"id": row.id, "attempt": row.attempts}).rowcount
            sent += 1
            log.info("alert delivery %d sent by %s", row.id, row.channel)
        db.session.commit()
        if changed != 1:
            log.warning("alert delivery %d: attempt %d outlived its lease; another worker retried it",
                        row.id, row.attempts)
    return sent


def _masked(text, target, config):
    """`text` without the target's secret parts (redact), as the masking rule shows it."""
    try:
        text, parts = text.replace(target, redact(target)), urlsplit(target)
        for secret in (parts.query, parts.fragment, parts.path):  # a reply may quote its path alone
            text = text.replace(secret, "…") if len(secret) > 1 else text
    except ValueError:  # a URL urlsplit cannot read ("http://[::1/x")
        text = text.replace(target, "(its URL)")
    return shown(text, config["JOBSWEB_MASK_KEYS"])


def send(channel, target, subject, body, data, config):
    """Send one notification now; SendError when the receiver did not take it."""
    if channel == "webhook":
        post_webhook(target, body, data, config["JOBSWEB_ALERT_TIMEOUT"], config["JOBSWEB_ALERT_ALLOW_PRIVATE_IPS"])
    else:
        send_email(target, subject, body, config)


def post_webhook(url, body, data, timeout, allow_private=False):
    """POST {"text": ..., "jobsweb": {...}}: Slack's incoming webhooks (and Mattermost's,
    and most chat tools') show `text`; other receivers can read the structured part. The whole
    send ends within `timeout` seconds; private addresses only with `allow_private`."""
    payload = json.dumps({"text": slack_escape(body), "jobsweb": data}).encode()
    try:
        webhook.post(url, payload, timeout, allow_private)
    except webhook.WebhookError as exc:
        message = str(exc)
        if not message.startswith("HTTP "):
            message = f"could not POST to {redact(url)}: {message}"
        raise SendError(message) from None


def slack_escape(message):
    """Slack reads <...> as links and mentions; its docs ask for these three escaped."""
    return message.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def send_email(recipients, subject, body, config):
    """One plain-text email through the configured SMTP server."""
    host, port, timeout = config["JOBSWEB_SMTP_HOST"], config["JOBSWEB_SMTP_PORT"], config["JOBSWEB_ALERT_TIMEOUT"]
    if not host:
        raise SendError("JOBSWEB_SMTP_HOST is not set")
    message = EmailMessage()
    message["From"] = config["JOBSWEB_SMTP_FROM"]
    message["To"] = recipients
    # A line break in a header makes EmailMessage raise (and the failure went unrecorded): names
    # stored before define() refused them still carry one.
    message["Subject"] = " ".join(subject.split())
    message.set_content(body)
    try:
        if port == SMTP_SSL_PORT:
            smtp = smtplib.SMTP_SSL(host, port, timeout=timeout, context=ssl.create_default_context())
        else:
            smtp = smtplib.SMTP(host, port, timeout=timeout)
        with smtp:
            if port != SMTP_SSL_PORT and config["JOBSWEB_SMTP_STARTTLS"]:
                smtp.starttls(context=ssl.create_default_context())
            if config["JOBSWEB_SMTP_USER"]:
                smtp.login(config["JOBSWEB_SMTP_USER"], config["JOBSWEB_SMTP_PASSWORD"] or "")
            smtp.send_message(message)
    except (smtplib.SMTPException, OSError) as exc:
        raise SendError(f"SMTP {host}:{port}: {exc}") from None


def routes(webhook_url=None, email_to=None):
    """[(channel, target)]: a definition's own webhook and recipients, else the defaults."""
    config = current_app.config
    out = []
    if webhook_url or config["JOBSWEB_ALERT_WEBHOOK_URL"]:
        out.append(("webhook", webhook_url or config["JOBSWEB_ALERT_WEBHOOK_URL"]))
    recipients = email_to or ", ".join(config["JOBSWEB_ALERT_EMAIL_TO"])
    if recipients and config["JOBSWEB_SMTP_HOST"]:
        out.append(("email", recipients))
    return out


def incident_link(incident_id=None):
    """The incidents page (at one incident) as an absolute URL, when JOBSWEB_BASE_URL says
    where the admin screen is; None otherwise."""
    base = current_app.config["JOBSWEB_BASE_URL"]
    if not base:
        return None
    anchor = f"incident-{incident_id}" if incident_id else None
    with current_app.test_request_context(base_url=base):
        return url_for("jobsweb.incidents.index", _external=True, _anchor=anchor)


def queue_test(sent_by):
    """Queue a test notification on every default channel; returns how many were queued."""
    link = incident_link()
    body = f"Test alert from jobsweb, sent by {sent_by}. If you read this, alerts reach you."
    if link:
        body += f"\n{link}"
    queued = 0
    for channel, target in routes():
        db.session.add(AlertDelivery(event="test", channel=channel, target=target,
                                     subject="jobsweb test alert", body=body,
                                     data={"event": "test", "sent_by": sent_by}))
        queued += 1
    return queued


def redact(target):
    """A webhook URL without its path, query or fragment (Slack's URLs and ?token= are the
    secret) and without a user:password; emails as is."""
    if "://" not in target:
        return target
    parts = urlsplit(target)
    host = parts.netloc.rsplit("@", 1)[-1]
    hidden = parts.path.strip("/") or parts.query or parts.fragment
    return f"{parts.scheme}://{host}/…" if hidden else f"{parts.scheme}://{host}"
