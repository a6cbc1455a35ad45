"""A failover, as managed PostgreSQL does it (issue 51, item 7), on both servers: a primary
(tests/private_databases.py) and a streaming standby made from it by pg_basebackup with the same
server's binaries (tests/servers.py, Standby). Two `flask run-jobs --forever` workers drain runs
and gunicorn serves the admin screen while an operator reads it, all through one multi-host
DATABASE_URL in the form docs/DEPLOY.md recommends (postgresql://user:pw@primary:port,standby:port/
db?target_session_attrs=read-write). The primary dies (an immediate stop, as a crash) and the
standby is promoted, as a provider's failover does. Nothing is restarted: every process reaches
the new primary through the same URL, each worker says so in a few lines ("database failed over:
now at ...", from its LISTEN connection), not a stream of errors, and every run ends once.

Replication is asynchronous, as providers' standbys are: what the primary acknowledged and had
not yet sent is lost. The drill makes that certain rather than a race: the standby stops
receiving, the primary acknowledges LOST more finishes, then dies. What a worker does with a
finish it believed written: once the database answers again, it looks for runs the database says
it holds and it does not (LOST_CLAIMS, there for claims that committed unseen); a run whose
finish was lost is one, `running` under its name, and is released back to the queue, no attempt
charged, and runs again at once (a worker that died instead leaves it to lease recovery, after
its lease). Its ctx.once key was lost in the same commit, so the handler's effect is done again:
once in the database (key and effect are on the new primary once), twice outside it
(test.receipt's outbox file, an email). A claim the primary acknowledged and lost leaves a run
the worker holds and the new primary has queued: its outcome is refused, and the run is claimed
and run again; ctx.once keeps its effect once where the first try's key reached the new primary.
And a handler's own transaction is not its run's finish: one the old primary acknowledged and
lost, whose outcome was still to be written at the crash, leaves its run `succeeded` on the new
primary without what the handler wrote (its effect key included). The drill counts those; only a
synchronous standby avoids them, and the lost finishes.

`python drills/run.py failover` runs it at full size (DRILL_FAILOVER_RUNS, DRILL_FAILOVER_LOST; 0
lost: streaming is not paused, and the standby has what it had when the primary died).
"""

import collections
import os
import signal
import subprocess
import sys
import threading
import time
from urllib.parse import quote

import psycopg
import pytest

from jobsweb import create_app
from jobsweb.core.database import check_database_url, database_url, libpq_url
from jobsweb.core.errors import ConfigError
from jobsweb.web.accounts import create_user
from tests import servers
from tests.conftest import PASSWORD, ROOT, SECRET_KEY, TEST_SETTINGS, committed, wait_for
from tests.forkserver import python_m
from tests.private_databases import migrated
from tests.test_deploy import free_port
from tests.test_web_outage import EMAIL, Browser

RUNS = int(os.environ.get("DRILL_FAILOVER_RUNS", 240))
LOST = int(os.environ.get("DRILL_FAILOVER_LOST", 10))  # finishes the old primary acknowledges and never sends
WORKERS = 2
CONCURRENCY = 4
# seconds: JOBSWEB_LEASE_SECONDS. Short, so that a run whose lease ran out on the standby (the
# heartbeats it missed) comes back through lease recovery within the test.
LEASE = 3
DRAIN_SECONDS = max(60, RUNS / 10)  # the workers drain ~40 runs a second here: room for a loaded machine
UNAVAILABLE_LINES = 6  # a worker's "database unavailable" lines at most: its backoff steps over the failover


@pytest.fixture(params=servers.KINDS)
def pair(request):
    """(primary, standby, the failover URL): a migrated primary with the admin's account, and its standby."""
    with migrated(request.param, "failover") as (primary, url):
        with committed(create_app({"SQLALCHEMY_DATABASE_URI": database_url(url), "TESTING": True,
                                   "SECRET_KEY": SECRET_KEY})):
            create_user(EMAIL, PASSWORD, "admin")
        standby = servers.Standby(primary)
        try:
            yield primary, standby, failover_url(primary, standby, "failover")
        finally:
            standby.cleanup()


def failover_url(primary, standby, database):
    """libpq's multi-host URI: each server's host (a socket folder percent-encoded) and port."""
    hosts = ",".join(f"{quote(host, safe='')}:{port}" for host, port in (primary.address(), standby.address()))
    password = getattr(primary, "password", "")
    return f"postgresql://postgres:{password}@{hosts}/{database}?target_session_attrs=read-write"


def on(uri):
    """rows(statement, params) on `uri`, a connection each."""
    def rows(statement, params=None):
        with psycopg.connect(uri, connect_timeout=5) as conn:
            cur = conn.execute(statement, params)
            return cur.fetchall() if cur.description else None
    return rows


def counts(rows):
    return {"succeeded": rows("SELECT count(*) FROM job_runs WHERE status = 'succeeded'")[0][0],
            "effects": rows("SELECT count(*) FROM job_effects")[0][0]}


class Admin:
    """gunicorn on the failover URL and a signed-in operator reading the runs page and /healthz in
    a thread: each answer's status and time.monotonic(), until stop()."""

    def __init__(self, url, log):
        port = free_port()
        env = {**os.environ, **TEST_SETTINGS, "DATABASE_URL": url, "SECRET_KEY": SECRET_KEY, "PORT": str(port),
               "WEB_CONCURRENCY": "1"}
        self.log = log
        with open(log, "w") as output:
            self.proc = subprocess.Popen([sys.executable, "-m", "gunicorn", "wsgi:app"], cwd=ROOT, env=env,
                                         stdout=output, stderr=subprocess.STDOUT)
        base = f"http://127.0.0.1:{port}"
        wait_for(lambda: self.proc.poll() is not None or Browser(base).get("/healthz")[0] == 200,
                 message="gunicorn to answer")
        assert self.proc.poll() is None, log.read_text()
        self.browser = Browser(base).sign_in()
        self.answers = []
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        while not self.stopping.is_set():
            for path in ("/runs", "/healthz"):
                status, _, _ = self.browser.get(path)
                self.answers.append((time.monotonic(), path, status))
            self.stopping.wait(0.1)

    def stop(self):
        self.stopping.set()
        self.thread.join(timeout=60)
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=30)
        return self.log.read_text()


def test_a_failover_reaches_every_process_through_the_multi_host_url_and_every_run_ends_once(pair, tmp_path,
                                                                                            figures):
    primary, standby, url = pair
    old, new = on(primary.get_uri("failover")), on(standby.get_uri("failover"))
    outbox = tmp_path / "outbox"
    old("INSERT INTO job_runs (job_type, payload, max_attempts) SELECT 'test.receipt', "
        "jsonb_build_object('order', n, 'outbox', %s::text), 10 FROM generate_series(1, %s) n",
        [str(outbox), RUNS])
    admin = None
    env = {**os.environ, **TEST_SETTINGS, "DATABASE_URL": url, "SECRET_KEY": SECRET_KEY,
           "JOBSWEB_LEASE_SECONDS": str(LEASE)}
    logs = [tmp_path / f"worker{i}.log" for i in range(WORKERS)]
    workers = []
    try:
        # The admin screen before the workers: under make test's load gunicorn took long enough to
        # start that the workers had finished every run before the pause below (CI, stop 60).
        admin = Admin(url, tmp_path / "gunicorn.log")
        for log in logs:
            with open(log, "w") as output:
                workers.append(python_m("flask", ["--app", "wsgi", "run-jobs", "--forever", "--concurrency",
                                                  CONCURRENCY, "--poll-interval", "1"],
                                        env=env, stdout=output, stderr=subprocess.STDOUT))
        wait_for(lambda: counts(old)["succeeded"] >= RUNS // 3, timeout=DRAIN_SECONDS, message="a third of the runs done")

        if LOST:
            # The standby stops receiving: the primary's next commits are acknowledged and never sent.
            # The workers wait frozen meanwhile, so that runs are left to finish after it: under the
            # make test's load the receiver took long enough to stop that all 240 were done first.
            for proc in workers:
                os.kill(proc.pid, signal.SIGSTOP)
            standby.pause_streaming()
            paused = counts(old)["succeeded"]
            for proc in workers:
                os.kill(proc.pid, signal.SIGCONT)
            wait_for(lambda: counts(old)["succeeded"] >= paused + LOST, timeout=30,
                     message=f"{LOST} finishes acknowledged after streaming paused at {paused} of {RUNS} succeeded")
        primary.stop("immediate")
        standby.replayed_what_it_received()
        at_promotion = counts(new)  # the standby's data, still read-only: what the new primary starts from
        standby.promote()
        promoted = time.monotonic()
        [(promoted_at,)] = new("SELECT now()")

        wait_for(lambda: counts(new)["succeeded"] == RUNS, timeout=DRAIN_SECONDS,
                 message="every run succeeded on the new primary")
        drained = time.monotonic() - promoted
        # Every worker listens on the new primary again (a wake-up there reaches them).
        wait_for(lambda: new("SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'LISTEN %'")[0][0] == WORKERS,
                 timeout=60, message="each worker's LISTEN on the new primary")
        [(first_claim,)] = new("SELECT extract(epoch FROM min(started_at) - %s) FROM job_runs WHERE started_at >= %s",
                               [promoted_at, promoted_at])
    finally:
        for proc in workers:
            proc.send_signal(signal.SIGTERM)
        exits = [proc.wait(timeout=60) for proc in workers]
        web_log = admin and admin.stop()
    outputs = [log.read_text() for log in logs]
    assert exits == [0] * WORKERS, outputs

    # Every run ended once on the new primary: succeeded, one succeeded attempt each; nothing
    # running, nothing queued.
    assert dict(new("SELECT status, count(*) FROM job_runs GROUP BY status")) == {"succeeded": RUNS}
    assert new("SELECT count(*), count(DISTINCT run_id) FROM job_attempts WHERE outcome = 'succeeded'") == [(RUNS, RUNS)]
    attempts = dict(new("SELECT coalesce(error_type, outcome), count(*) FROM job_attempts GROUP BY 1"))
    # Its effect key once each, but where the handler's commit was lost with the old primary and
    # its outcome, written after the promotion, was not: no more than the handlers then under way.
    [(missing,)] = new("SELECT count(*) FROM job_runs r WHERE NOT EXISTS (SELECT FROM job_effects "
                       "WHERE key = 'receipt_email:' || (r.payload->>'order'))")
    assert new("SELECT count(*) FROM job_effects") == [(RUNS - missing,)]
    assert missing <= WORKERS * CONCURRENCY

    # What the old primary had acknowledged that the new one never got (read once the old one is
    # started again, with nothing left to reach it: it would be a second primary).
    primary.start()
    lost = {what: n - at_promotion[what] for what, n in counts(old).items()}
    assert lost["succeeded"] >= LOST
    sent = collections.Counter(outbox.read_text().splitlines())
    assert len(sent) == RUNS
    duplicated = sum(n - 1 for n in sent.values())
    # Each run whose effect key was lost ran again and sent again, but those whose outcome the new
    # primary took (missing); besides, only handlers under way at the crash (their key rolled back
    # with the connection) may have sent once more.
    again = lost["effects"] - missing
    assert again <= duplicated <= again + WORKERS * CONCURRENCY, (lost, missing, duplicated)

    # The workers: a few lines over the failover, then where they are, not a stream of errors.
    unavailable = [out.count("database unavailable") for out in outputs]
    for out in outputs:
        assert "Traceback" not in out, out
        assert "database failed over: now at " in out, out
        assert out.count("database unavailable") <= UNAVAILABLE_LINES, out
    warnings = [sum(1 for line in out.splitlines() if " WARNING " in line or " ERROR " in line) for out in outputs]

    # The admin screen: answered all along, 503 while no primary took writes, 200 again after
    # without a restart.
    assert "Traceback" not in web_log, web_log
    statuses = collections.Counter(status for _, _, status in admin.answers)
    assert set(statuses) <= {200, 503}, statuses
    back = [at for at, _, status in admin.answers if at > promoted and status == 200]
    assert back, admin.answers[-10:]
    assert all(status == 200 for at, _, status in admin.answers if at > back[0] + 5), admin.answers

    figures(runs=RUNS, finishes_lost_at_the_failover=lost["succeeded"], effect_keys_lost=lost["effects"],
            runs_lost=0, runs_ended_twice=0, external_effects_sent_twice=duplicated,
            runs_succeeded_without_their_handlers_commit=missing,
            promotion_to_first_claim_seconds=round(float(first_claim), 2),
            promotion_to_all_done_seconds=round(drained, 1), attempts=attempts,
            unavailable_lines_per_worker=unavailable, warning_lines_per_worker=warnings,
            admin_503s=statuses.get(503, 0), admin_first_200_after_promotion_seconds=round(back[0] - promoted, 2))


# The spellings of several hosts jobsweb reads, each as SQLAlchemy's psycopg dialect (the web
# process) and libpq (the worker, its LISTEN, the processes it starts) then see it: every host,
# in order, each with its port.
SPELLINGS = {
    "libpq's URI": "postgresql://u:pw@10.0.0.1:5432,10.0.0.2:5433/app?target_session_attrs=read-write",
    "libpq's query string": "postgresql://u:pw@/app?host=10.0.0.1,10.0.0.2&port=5432,5433&target_session_attrs=read-write",
    "SQLAlchemy's": "postgresql://u:pw@/app?host=10.0.0.1:5432&host=10.0.0.2:5433&target_session_attrs=read-write",
    "postgres:// and psycopg's driver": "postgres://u:pw@10.0.0.1:5432,10.0.0.2:5433/app?target_session_attrs=read-write",
}


@pytest.mark.parametrize("raw", SPELLINGS.values(), ids=SPELLINGS.keys())
def test_every_spelling_of_several_hosts_reaches_the_web_and_the_worker_as_every_host_in_order(raw):
    url = check_database_url("DATABASE_URL", database_url(raw), postgresql=True)
    _, web = url.get_dialect()().create_connect_args(url)
    assert (web["host"], web["port"], web["target_session_attrs"]) == ("10.0.0.1,10.0.0.2", "5432,5433", "read-write")
    libpq = libpq_url(url)
    worker = psycopg.conninfo.conninfo_to_dict(libpq)
    assert (worker["host"], worker["port"], worker["dbname"], worker["password"]) == \
        ("10.0.0.1,10.0.0.2", "5432,5433", "app", "pw")
    assert [(a["host"], a["port"]) for a in psycopg.conninfo.conninfo_attempts(worker)] == \
        [("10.0.0.1", "5432"), ("10.0.0.2", "5433")]
    # A worker hands its children DATABASE_URL=libpq_url(...): read again, the same.
    assert libpq_url(check_database_url("DATABASE_URL", database_url(libpq))) == libpq


def test_a_socket_folder_in_the_host_list_is_percent_encoded_as_libpq_reads_it():
    libpq = libpq_url(database_url("postgresql://postgres@%2Frun%2Fa:5432,%2Frun%2Fb:5432/app"))
    assert psycopg.conninfo.conninfo_to_dict(libpq)["host"] == "/run/a,/run/b"


@pytest.mark.parametrize("raw, says", [
    ("postgresql://u:pw@10.0.0.1:5432,10.0.0.2:54x/app", "DATABASE_URL has port '54x' for host '10.0.0.2', which is no port"),
    ("postgresql://u:pw@/app?host=10.0.0.1,10.0.0.2&port=5432", "DATABASE_URL names 2 hosts and 1 port(s): give each host"),
])
def test_a_bad_host_list_stops_start_up_with_one_line_naming_the_setting(raw, says):
    with pytest.raises(ConfigError) as error:
        check_database_url("DATABASE_URL", database_url(raw))
    assert str(error.value).startswith(says) and "pw" not in str(error.value)
