"""Whether this process can serve: its database answers and its schema is the one the code
expects, with every table, index, function and trigger of it (GET /healthz, web/probes.py,
answers with it: to anonymous callers only the Problem's kind)."""

import threading

from flask import current_app
from sqlalchemy.exc import SQLAlchemyError

from ..core import deadlines, schema, schema_objects
from ..core.database import db, execute, outage

# A database never migrated has no version table: checked first (a query naming a
# missing table fails however it is written), so that it is a reason to report.
HAS_VERSION_TABLE = f"SELECT to_regclass('{schema.VERSION_TABLE}') IS NOT NULL"
SCHEMA_VERSION = f"SELECT version_num FROM {schema.VERSION_TABLE}"


def migrations(app):
    """(heads, every revision) of the code this process runs, read from the scripts once per app."""
    known = app.extensions.get("jobsweb_migrations")
    if known is None:
        known = app.extensions["jobsweb_migrations"] = schema.revisions()
    return known


class Problem(str):
    """Why this process cannot serve, in words (for the log and signed-in viewers), with `kind`,
    "database" or "schema": all that /healthz tells a caller who has not signed in, since the
    words name the schema's revisions and its missing tables, indexes and functions."""

    def __new__(cls, kind, words):
        found = super().__new__(cls, words)
        found.kind = kind
        return found


def problem():
    """Why this process cannot serve, a Problem, or None when it can."""
    try:
        migrated = execute(HAS_VERSION_TABLE).scalar()
        current = set(execute(SCHEMA_VERSION).scalars()) if migrated else set()
        # At the head, every table, index, function and trigger of it is there (a restore of
        # the tables alone lacks the functions): one catalog query at each check, no cache.
        lacking = schema_objects.missing() if current == {schema_objects.HEAD} else []
    except SQLAlchemyError as exc:
        db.session.rollback()
        return Problem("database", outage(exc))
    heads, revisions = migrations(current_app)
    if not current:
        return Problem("schema", "database schema is not migrated: run `flask jobs migrate`")
    if lacking:
        return Problem("schema", schema_objects.describe(lacking))
    if current == heads:
        return None
    if not current & revisions:
        # Newer than this code: the release phase of a deploy migrated before this (old)
        # process was replaced. Migrations are additive, so it still serves; a 503 here would
        # take every old process out of the router before the new ones are up.
        return None
    return Problem("schema", f"database schema is at {', '.join(sorted(current))}, the code expects "
                             f"{', '.join(sorted(heads))}: run `flask jobs migrate`")


class Probe:
    """problem(), answered within a budget: a load balancer's probe must get its 503 before its
    own timeout (often 2 s), from a database that may be silent. The check runs on a thread of
    its own, one at a time per process: probes that come while one waits share its answer, so
    an outage never piles up threads or connections. Its round trips are bounded too (by
    `round_trip` seconds on jobsweb's own engine), so the thread ends soon after the answer.
    A new web process runs its first check before it serves (web/probes.py, warm_process): the
    first connection and the migrations' read are not paid inside a probe's budget."""

    def __init__(self, app, round_trip):
        self.app = app
        self.round_trip = round_trip
        self.lock = threading.Lock()
        self.done = None  # the Event of the check under way (or of the last one)
        self.answer = {}
        self.said = None  # the last answer logged (changed)

    def start(self):
        """Start a check unless one is under way; (its Event, its answer once the Event is set)."""
        with self.lock:
            if self.done is None or self.done.is_set():
                self.done, self.answer = threading.Event(), {}
                threading.Thread(target=self._check, args=(self.done, self.answer), daemon=True,
                                 name="jobsweb-health").start()
            return self.done, self.answer

    def problem(self, budget):
        """What problem() says, or that the database did not answer within `budget` seconds."""
        done, answer = self.start()
        if done.wait(budget):
            return answer["problem"]
        return Problem("database", f"database did not answer within {budget:g} s")

    def changed(self, answer):
        """Whether `answer` (a Problem or None) differs from the last one this was told of: the
        log says each change once, not each probe of a load balancer polling every few seconds."""
        with self.lock:
            changed, self.said = answer != self.said, answer
        return changed

    def _check(self, done, answer):
        try:
            with deadlines.bounded(self.round_trip), self.app.app_context():
                answer["problem"] = problem()
        except Exception as exc:  # noqa: BLE001 - reported as the probe's answer, not lost in a thread
            answer["problem"] = Problem("database", f"health check failed: {type(exc).__name__}")
        finally:
            done.set()
