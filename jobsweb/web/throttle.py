"""Sign-in throttling: after FAILURES_ALLOWED wrong passwords for one account, or from one
address, within WINDOW, sign-in answers 429 with Retry-After until the oldest of them ages out.

Failures are rows in the database, so the limit holds across every gunicorn worker and restart;
a throttled attempt is refused before its password is hashed (each check costs ~100 ms of CPU).
"""

from dataclasses import dataclass

from ..core.database import execute

FAILURES_ALLOWED = 10
WINDOW = 15 * 60  # seconds

# The newest FAILURES_ALLOWED failures of the account (index jobsweb_sign_in_failures_email);
# the last row's age says when the count falls below the limit.
RECENT_FAILURES_BY_EMAIL = """
SELECT at FROM jobsweb_sign_in_failures
WHERE email = %(email)s AND at > now() - make_interval(secs => %(window)s)
ORDER BY at DESC LIMIT %(limit)s
"""
# The same for one client address (index jobsweb_sign_in_failures_address).
RECENT_FAILURES_BY_ADDRESS = """
SELECT at FROM jobsweb_sign_in_failures
WHERE address = %(address)s AND at > now() - make_interval(secs => %(window)s)
ORDER BY at DESC LIMIT %(limit)s
"""
# Seconds until a failure at %(at)s leaves the window.
SECONDS_LEFT = "SELECT ceil(extract(epoch FROM %(at)s + make_interval(secs => %(window)s) - now()))"
RECORD_FAILURE = "INSERT INTO jobsweb_sign_in_failures (email, address) VALUES (%(email)s, %(address)s)"
# Rows past the window count for nothing (index jobsweb_sign_in_failures_at).
FORGET_OLD_FAILURES = "DELETE FROM jobsweb_sign_in_failures WHERE at < now() - make_interval(secs => %(window)s)"


@dataclass(frozen=True)
class Attempt:
    email: str
    address: str

    @classmethod
    def of(cls, email, address):
        return cls((email or "").strip().lower()[:254], address or "unknown")

    def retry_after(self):
        """Seconds to wait before this account or address may try again; 0 if it may now."""
        waits = [0]
        params = {"email": self.email, "address": self.address, "window": WINDOW, "limit": FAILURES_ALLOWED}
        for statement in (RECENT_FAILURES_BY_EMAIL, RECENT_FAILURES_BY_ADDRESS):
            rows = execute(statement, params).fetchall()
            if len(rows) >= FAILURES_ALLOWED:
                seconds = execute(SECONDS_LEFT, {"at": rows[-1][0], "window": WINDOW}).scalar()
                waits.append(max(1, int(seconds)))
        return max(waits)

    def failed(self):
        """Record a wrong password (the caller commits)."""
        execute(FORGET_OLD_FAILURES, {"window": WINDOW})
        execute(RECORD_FAILURE, {"email": self.email, "address": self.address})
