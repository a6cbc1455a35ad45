"""Sign-in limits that slow guessing without letting anyone lock a person out, as OWASP's
authentication cheat sheet, django-axes (account and address together), Entra's smart lockout
(familiar and unfamiliar locations) and OWASP's device cookies do it. Within WINDOW:

- an address with FAILURES_ALLOWED wrong passwords, for any accounts, may not try again until
  the oldest of them ages out (429 with Retry-After);
- an account with FAILURES_ALLOWED wrong passwords, from anywhere, may then be tried only from
  an address that has not failed for it, and not faster than one attempt per slow_down()
  after its latest failure (2 s, doubling with each failure, at most SLOW_DOWN_MAX): guessing
  spread over many addresses, or over a new forged X-Forwarded-For per request, gets about one
  guess a minute, never more;
- a browser that has signed in to the account before carries a device cookie for it (DEVICE_COOKIE,
  signed with the app's secret key): its attempts for that account are counted under the device
  instead of the address, so neither the account's slow-down nor another's failures from the
  same address (10 forged ones aimed at a chosen address, or everybody's typos behind one
  proxy) hold its owner back; the device has its own FAILURES_ALLOWED.

A limit used to block the account itself: ten wrong passwords every 15 minutes from anywhere
kept a known account locked for good. The address is request.remote_addr, the client's once
JOBSWEB_PROXY_HOPS says which proxies to trust (otherwise everyone behind a proxy shares one);
a client that reaches the app past such a proxy chooses its own address, which is why the
account's own limit does not depend on it.

Failures are rows in the database, so the limits hold across every gunicorn worker and restart.
`flask users unlock` forgets them (forget()).
"""

import math
import secrets
from dataclasses import dataclass
from datetime import timedelta

from flask import current_app
from itsdangerous import BadSignature, URLSafeTimedSerializer

from ..core.database import db, execute
from ..core.errors import EMAIL_MAX_CHARS

FAILURES_ALLOWED = 10
WINDOW = 15 * 60  # seconds
SLOW_DOWN_FIRST = 2  # seconds between attempts for an account at its limit, doubling per failure
SLOW_DOWN_MAX = 60  # seconds: about 15 more guesses per WINDOW however many addresses send them
DEVICE_COOKIE = "jobsweb_device"
DEVICE_DAYS = 180  # a device cookie is good this long after the sign-in that set it

# Attempts for one address, and for one account, take their turn: RESERVE is then the only
# writer of the rows LIMITS reads. Without it, 40 wrong passwords sent at once were 17 password
# checks against a limit of 10 (each read the count before any had written its failure).
# The address's lock is always taken before the account's, so two attempts never wait for each
# other's second lock. Transaction-scoped: the commit after RESERVE releases both.
LOCK = "SELECT pg_advisory_xact_lock(hashtextextended(%(key)s, 0))"
# In its own statement after LOCK (under READ COMMITTED each statement reads a new snapshot, so
# it sees the failures the attempts before it committed): the newest FAILURES_ALLOWED failures
# of the address (index jobsweb_sign_in_failures_address) and of the account (index
# jobsweb_sign_in_failures_email), the newest failure of this address for this account (the
# address's rows: at most FAILURES_ALLOWED of them are recent), and how many failures the
# account has (the same index; the slow-down keeps them to a few dozen a window).
LIMITS = """
SELECT now(),
       array(SELECT at FROM jobsweb_sign_in_failures
             WHERE address = %(address)s AND at > now() - make_interval(secs => %(window)s)
             ORDER BY at DESC LIMIT %(limit)s),
       array(SELECT at FROM jobsweb_sign_in_failures
             WHERE email = %(email)s AND at > now() - make_interval(secs => %(window)s)
             ORDER BY at DESC LIMIT %(limit)s),
       (SELECT max(at) FROM jobsweb_sign_in_failures
        WHERE address = %(address)s AND email = %(email)s AND at > now() - make_interval(secs => %(window)s)),
       (SELECT count(*) FROM jobsweb_sign_in_failures
        WHERE email = %(email)s AND at > now() - make_interval(secs => %(window)s))
"""
# The attempt counts as a failure from before its password is checked until it proves right
# (FORGET_RESERVED): a web process that dies while checking leaves a failure, not a free guess.
RESERVE = """
INSERT INTO jobsweb_sign_in_failures (email, address) VALUES (%(email)s, %(address)s) RETURNING id
"""
# A right password: this attempt, and this address's earlier failures for the account (its
# owner's typos), count no more. Other addresses' failures stay.
FORGET_RESERVED = """
DELETE FROM jobsweb_sign_in_failures WHERE id = %(id)s OR (email = %(email)s AND address = %(address)s)
"""
# Rows past the window count for nothing (index jobsweb_sign_in_failures_at). SKIP LOCKED: two
# attempts deleting the same old rows would otherwise wait for each other while holding their
# advisory locks (or deadlock, meeting the rows in different orders); a batch at a time, so that
# the attempt after a burst of guesses does not delete them all.
FORGET_OLD_FAILURES = """
DELETE FROM jobsweb_sign_in_failures WHERE id IN (
    SELECT id FROM jobsweb_sign_in_failures WHERE at < now() - make_interval(secs => %(window)s)
    LIMIT 1000 FOR UPDATE SKIP LOCKED)
"""
# flask users unlock: an account's failures, an address's, or both.
FORGET = """
DELETE FROM jobsweb_sign_in_failures
WHERE (%(email)s::text IS NOT NULL AND email = %(email)s) OR (%(address)s::text IS NOT NULL AND address = %(address)s)
"""


@dataclass(frozen=True)
class Verdict:
    """What the limits said about one attempt."""

    wait: int  # seconds before this address may try this account; 0: it may now
    failure_id: int | None = None  # the failure recorded for it, while its password is checked
    reaches: tuple = ()  # the limits a wrong password now reaches: "address", "account"
    slowed: bool = False  # the wait is the account's slow-down, not this address's own failures


def slow_down(failures):
    """Seconds an account with `failures` (at least FAILURES_ALLOWED) in the window is tried no
    sooner than after its latest failure, from addresses and devices that have not failed for it."""
    return min(SLOW_DOWN_FIRST * 2 ** (failures - FAILURES_ALLOWED), SLOW_DOWN_MAX)


@dataclass(frozen=True)
class Attempt:
    email: str
    address: str  # the client's address, audited
    device: str | None = None  # the device this browser proved for the account, by its cookie

    @classmethod
    def of(cls, email, address, device_cookie=None):
        email = normal_email(email)
        return cls(email, address or "unknown", known_device(device_cookie, email))

    @property
    def counted_as(self):
        """Whose failures the address limit counts: the device's when the browser proved one for
        this account, so that failures others send from its address never reach it."""
        return f"device {self.device}" if self.device else self.address

    def reserve(self):
        """The verdict on this attempt. When it may go on, it is recorded as a failure and
        committed (the locks released) before the caller checks its password (~100 ms of CPU,
        never spent on an attempt past a limit)."""
        params = {"email": self.email, "address": self.counted_as, "window": WINDOW, "limit": FAILURES_ALLOWED}
        execute(LOCK, {"key": f"sign-in address {self.counted_as}"})
        execute(LOCK, {"key": f"sign-in account {self.email}"})
        now, by_address, by_account, last_here, account_failures = execute(LIMITS, params).one()
        window = timedelta(seconds=WINDOW)
        until = []  # when each limit this attempt is past lets it try
        if len(by_address) >= FAILURES_ALLOWED:
            until.append(by_address[-1] + window)  # the address may try when its oldest counted failure ages out
        if len(by_account) >= FAILURES_ALLOWED and last_here is not None:
            # ...and this address may try the account again when it has not failed for it within
            # the window, or when the account is under its limit, whichever comes first.
            until.append(min(last_here, by_account[-1]) + window)
        slowed = (self.device is None and account_failures >= FAILURES_ALLOWED
                  and by_account[0] + timedelta(seconds=slow_down(account_failures)) > now)
        if slowed:
            # A new address per attempt (a forged X-Forwarded-For each time) got a guess each:
            # the account as a whole is slowed, whatever address asks. Its owner's browser is not.
            until.append(by_account[0] + timedelta(seconds=slow_down(account_failures)))
        if until:
            db.session.commit()
            return Verdict(max(1, math.ceil((max(until) - now).total_seconds())), slowed=slowed and len(until) == 1)
        execute(FORGET_OLD_FAILURES, {"window": WINDOW})
        failure_id = execute(RESERVE, params).scalar()
        db.session.commit()
        reaches = (("address",) * (len(by_address) + 1 == FAILURES_ALLOWED)
                   + ("account",) * (len(by_account) + 1 == FAILURES_ALLOWED))
        return Verdict(0, failure_id, reaches)

    def succeeded(self, verdict):
        """The password was right: its reserved failure, and this address's (or device's) earlier
        ones for the account, count no more (the caller commits)."""
        execute(FORGET_RESERVED, {"id": verdict.failure_id, "email": self.email, "address": self.counted_as})


def _devices():
    return URLSafeTimedSerializer(current_app.secret_key, salt="jobsweb-sign-in-device")


def new_device_cookie(email):
    """The value of DEVICE_COOKIE for a browser that has just signed in to `email`'s account."""
    return _devices().dumps({"email": normal_email(email), "device": secrets.token_urlsafe(16)})


def known_device(cookie, email):
    """The device a DEVICE_COOKIE value proves for the account `email`, or None (no cookie, a
    forged or expired one, or one of another account)."""
    if not cookie:
        return None
    try:
        proof = _devices().loads(cookie, max_age=DEVICE_DAYS * 86400)
    except BadSignature:
        return None
    if not isinstance(proof, dict) or proof.get("email") != email or not isinstance(proof.get("device"), str):
        return None
    return proof["device"]


def normal_email(email):
    """An email as the limits count it: trimmed, lower case, at most EMAIL_MAX_CHARS characters."""
    return (email or "").strip().lower()[:EMAIL_MAX_CHARS]


def forget(email=None, address=None):
    """Forget the failures of an account, of an address, or of both, as if the window had passed
    (`flask users unlock`); how many. The caller commits."""
    params = {"email": normal_email(email) if email else None, "address": address or None}
    return execute(FORGET, params).rowcount
