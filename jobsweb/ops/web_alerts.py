"""Alerts evaluated by web processes: a daemon thread in each one runs what a worker's alert
duty runs (alerts.Alerter), so incidents open and notifications go out with no worker at all,
which is when a team most needs to hear (cron stopped, every worker crashed).

The extension starts it for the app it is set up on (extension.py), in any process that
builds the app outside `flask` commands: gunicorn's, another WSGI server's (a script that
builds the app for other reasons sets JOBSWEB_WEB_ALERTS=false), for the standalone app and
a team's own app alike. Not in `flask` commands (a worker's duty evaluates there; `flask jobs migrate` must not), not
in apps with TESTING set, and not with JOBSWEB_WEB_ALERTS=false. Every web process evaluates:
the advisory lock and the unique indexes of alerts.evaluate() keep it exactly once.
"""

import atexit
import logging
import os
import threading

import click

from ..core.database import db
from .alerts import Alerter

log = logging.getLogger("jobsweb.alerts")

BACKOFF_CAP = 60.0  # seconds: the longest wait between tries during an outage
EXIT_JOIN = 2.0  # seconds an exiting process waits for a pass under way (its round trips are bounded)
_started = []  # the WebAlerts running in this process, for _after_fork and _stop_at_exit
_fork_hook = []  # one registration per process tree: a child inherits its parent's
_exit_hook = []  # one registration per process


class WebAlerts:
    """Evaluate and send every JOBSWEB_ALERT_INTERVAL seconds on a daemon thread until stop()."""

    def __init__(self, app):
        self.app = app
        self.alerter = Alerter(app)
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="jobsweb-web-alerts", daemon=True)

    def start(self):
        if not _fork_hook:
            os.register_at_fork(after_in_child=_after_fork)
            _fork_hook.append(True)
        if not _exit_hook:
            # atexit runs the last registered first: weakref's own exit hook was registered with
            # the first finalizer, made while jobsweb's imports were (the test of this hook
            # fails should that change), so _stop_at_exit runs before it.
            atexit.register(_stop_at_exit)
            _exit_hook.append(True)
        _started.append(self)
        self.thread.start()
        log.info("alerts: evaluated in this web process (pid %d) every %gs", os.getpid(), self.alerter.every)
        return self

    def _loop(self):
        # The first pass waits one interval: starting the app is not slowed by it.
        wait = self.alerter.every
        while not self.stopping.wait(wait):
            wait = self.step(wait)

    def step(self, wait):
        """One pass; the seconds to wait before the next. While the database is unavailable the
        wait doubles, up to BACKOFF_CAP, with one log line per try: an outage of an hour is a
        few dozen lines per process, not one every interval. The first pass that works again
        says so and goes back to the interval."""
        every = self.alerter.every
        unavailable = self.alerter.attempt()
        if unavailable is None:
            if wait > every:
                log.info("alerts: database available again; evaluating every %gs", every)
            return every
        wait = min(max(wait * 2, every), max(BACKOFF_CAP, every))
        log.warning("alerts: database unavailable (%s); next try in %gs", unavailable, wait)
        return wait

    def stop(self):
        """Stop evaluating, and let a send in progress finish (tests; a process exit stops the
        thread only: _stop_at_exit)."""
        self.stopping.set()
        self.thread.join()
        self.alerter.stop()
        if self in _started:
            _started.remove(self)


def start_if_serving(app):
    """Start evaluating in this process unless it runs a `flask` command, the app is a test app
    or JOBSWEB_WEB_ALERTS is false; the WebAlerts, or None."""
    if not app.config["JOBSWEB_WEB_ALERTS"] or app.testing or click.get_current_context(silent=True):
        return None
    return WebAlerts(app).start()


def _stop_at_exit():
    """At the process's exit, before weakref's exit hook: the threads stop. SQLAlchemy's pool
    makes a weakref.finalize for each connection it hands out, and that hook's walk over them
    (CPython 3.11) fails with "dictionary changed size during iteration" when a thread checks
    one out meanwhile: a traceback in a gunicorn worker's exit, during an outage."""
    for watch in _started:
        watch.stopping.set()
    for watch in _started:
        watch.thread.join(EXIT_JOIN)


def _after_fork():
    """In a child forked from a process whose thread ran (gunicorn --preload forks its workers
    from the master, where the app was built): the thread did not come along, and the pooled
    connections it used belong to the parent. Sharing one would corrupt both sessions, so the
    child's engine starts with an empty pool (SQLAlchemy's advice for os.fork) and never
    touches the parent's connections; the parent keeps evaluating."""
    for watch in _started:
        with watch.app.app_context():
            db.engine.dispose(close=False)
    _started.clear()
