"""The admin screen while the database is away (down, restarting, out of connection slots, or
silent on a broken path): every page answers at once with a short 503, never a stack trace nor
a hang, and works again by itself with the next request once the database answers.

A request of jobsweb's blueprint waits at most ROUND_TRIP_LIMIT for any one answer of the
database, through jobsweb's own engine (core/deadlines.py); a team's engine, inside its own
app, keeps the bounds the team gave it, and its errors get the same 503 page here.

An action that may change very many runs (cancel, delete, retry: a graph of 100,000 runs waiting
for one another) has a longer bound, ACTION_ROUND_TRIP_LIMIT, and is also bounded on the server a
little under it (`limit_action`): past that the server stops the statement and releases its
locks, instead of going on for minutes after a cut socket, and the page says in words that
nothing was changed (`gave_up`).

A conflict (core/conflicts.py: another transaction, a worker's claim or finish, changed the same
rows) is not an outage either: the request, or each batch of a bulk action, is run again for
conflicts.INTERACTIVE seconds, and past that the page says so (`conflicted`), never "Database
unavailable".
"""

import logging
from contextlib import ExitStack

from flask import g
from sqlalchemy.exc import OperationalError, TimeoutError as PoolTimeout

from ..core import conflicts, deadlines
from ..core.database import db, outage
from ..engine.runs import run_actions
from .rendering import render

log = logging.getLogger("jobsweb.web")

# Seconds one round trip of a request may take. The admin's statements take milliseconds, the
# heaviest (stats over a large table, a bulk action's batch) about a second: one still waiting
# after this long is on a path that went silent. Opening a connection is bounded apart
# (deadlines.CONNECT_TIMEOUT), so a page answers within about the sum of the two.
ROUND_TRIP_LIMIT = 5.0
RETRY_AFTER = 5  # seconds, in the 503's Retry-After
ERRORS = (OperationalError, PoolTimeout)
CONFLICT_RETRY_AFTER = 1  # seconds, in a conflict's 503: the workers' trips that met it last milliseconds
# An operator's action on runs (cancel, delete, retry) may change 100,000 runs waiting for one
# another: seconds of writing on a busy server (about 3 s on a quiet one), a statement that
# answers, not a silent path. Its round trips get this longer bound (gunicorn's timeout is 60 s),
# and the server stops its statements a little before (ACTION_LIMIT), so that the server's error
# comes back before the client cuts: then the server has stopped and released its locks.
ACTION_ROUND_TRIP_LIMIT = 15.0
ACTION_LIMIT = ACTION_ROUND_TRIP_LIMIT - 0.5
QUERY_CANCELED = "57014"  # the SQLSTATE of a statement the server stopped (statement_timeout)


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


def limit_action():
    """The rest of the request's round trips wait up to ACTION_ROUND_TRIP_LIMIT, and this
    transaction's statements are stopped by the server past ACTION_LIMIT (each transaction of a
    bulk action says so again: SET LOCAL ends with it)."""
    stack = g.get("jobsweb_bounds")
    if stack is not None and not g.get("jobsweb_action_bound"):
        stack.enter_context(deadlines.bounded(ACTION_ROUND_TRIP_LIMIT))  # lifted with the request's own
        g.jobsweb_action_bound = True
    run_actions.limit_on_server(ACTION_LIMIT)


def stopped(exc):
    """Whether `exc` is the server stopping a statement (ACTION_LIMIT): a database that answered."""
    return getattr(getattr(exc, "orig", None), "sqlstate", None) == QUERY_CANCELED


def gave_up(what, unchanged, done=""):
    """The 503 page of an action the server stopped at ACTION_LIMIT, rolled back: `what` ("Cancelling
    run 812") took too long, `unchanged` ("nothing was cancelled"); `done`, what earlier batches did."""
    db.session.rollback()
    log.warning("%s took longer than %g s: the database stopped it", what, ACTION_LIMIT)
    message = (f"{what} took longer than {ACTION_LIMIT:g} s, and the database stopped it: {unchanged}. {done}"
               "Try again in a moment (another transaction may have held some of these runs). If it stops "
               "again, the runs that wait for these are too many to change within a web request: do it in "
               "psql or `flask shell`, which have no such limit.")
    response = render("error.html", "partials/_error.html", code=503, title="Took too long", message=message)
    response.status_code = 503
    response.headers["Retry-After"] = str(RETRY_AFTER)
    return response


def conflicted(exc, done=""):
    """The 503 page of a request, or a bulk action's batch, that met a conflict at every run
    (conflicts.Conflict, or a conflict that could not be run again: the request had committed),
    rolled back; `done`, what earlier batches did."""
    db.session.rollback()
    if isinstance(exc, conflicts.Conflict):
        words = str(exc)
    else:
        words = f"{conflicts.GAVE_UP} ({conflicts.KINDS[conflicts.kind(exc)]}: {conflicts.first_line(exc)})"
    message = (f"{words[0].upper()}{words[1:]}. Another transaction (a worker claiming or finishing these runs) "
               f"changed the same rows at the same moment every time this was tried, and the database rolled it "
               f"back: nothing of it was changed. {done}")
    response = render("error.html", "partials/_error.html", code=503, title="Busy", message=message.strip())
    response.status_code = 503
    response.headers["Retry-After"] = str(CONFLICT_RETRY_AFTER)
    return response
