"""The admin screen while the database is away (down, restarting, out of connection slots, or
silent on a broken path): every page answers at once with a short 503, never a stack trace nor
a hang, and works again by itself with the next request once the database answers.

A request of jobsweb's blueprint waits at most ROUND_TRIP_LIMIT for any one answer of the
database, through jobsweb's own engine (core/deadlines.py); a team's engine, inside its own
app, keeps the bounds the team gave it, and its errors get the same 503 page here.
"""

import logging
from contextlib import ExitStack

from flask import g
from sqlalchemy.exc import OperationalError, TimeoutError as PoolTimeout

from ..core import deadlines
from ..core.database import db, outage

log = logging.getLogger("jobsweb.web")

# Seconds one round trip of a request may take. The admin's statements take milliseconds, the
# heaviest (stats over a large table, a bulk action's batch) about a second: one still waiting
# after this long is on a path that went silent. Opening a connection is bounded apart
# (deadlines.CONNECT_TIMEOUT), so a page answers within about the sum of the two.
ROUND_TRIP_LIMIT = 5.0
RETRY_AFTER = 5  # seconds, in the 503's Retry-After
ERRORS = (OperationalError, PoolTimeout)


def bound_waits():
    """Before each request of the blueprint: bound its database round trips."""
    g.jobsweb_bounds = stack = ExitStack()
    stack.enter_context(deadlines.bounded(ROUND_TRIP_LIMIT))


def end_bounds(exc=None):
    """After each request: end its session while still bounded (Flask-SQLAlchemy would end it
    later, unbounded, and its rollback could wait on a silent path), then lift the bound."""
    stack = g.pop("jobsweb_bounds", None)
    if stack is None:
        return
    try:
        db.session.close()
    except ERRORS:
        pass  # the connection is gone; the pool has dropped it
    finally:
        stack.close()


def reason(exc):
    """Why the database could not be used, in a few words for a page or a ping's answer; the
    driver's own message, naming hosts and ports, goes to the log only."""
    words = outage(exc)
    log.warning("%s: %s", words, str(getattr(exc, "orig", None) or exc).strip().splitlines()[0])
    return words


def explain(exc):
    """The 503 page's words."""
    words = reason(exc)
    return f"{words[0].upper()}{words[1:]}. This page works again by itself once it answers; try again in a moment."
