"""Alerts with no worker running: the web app evaluates them itself (ops/web_alerts.py), under
gunicorn, standalone and inside a team's app; the no_worker and slow incidents (ops/stalls.py)."""

import signal
import subprocess
import sys
import time

import click
import pytest

from jobsweb import create_app, definitions, enqueue
from jobsweb.core.errors import ConfigError
from jobsweb.core.settings import from_environment
from jobsweb.ops import alerts
from tests.conftest import ROOT, SECRET_KEY, committed, define, wait_for
from tests.processes import finish
from tests.test_deploy import free_port, get

ALERT_INTERVAL = "0.5"  # seconds between evaluations in the spawned processes


@pytest.fixture
def spawn_web(spawn_worker, tmp_path):
    """spawn_web(target, *gunicorn_args, health=path, **settings): gunicorn serving `target`
    (with the repository's gunicorn.conf.py: two processes), alerts evaluated every
    ALERT_INTERVAL; returns its base URL once it answers."""
    servers = []

    def spawn(target="wsgi:app", *args, health="/healthz", **settings):
        port = free_port()
        env = spawn_worker.env(PORT=port, JOBSWEB_WEB_ALERTS="true", JOBSWEB_ALERT_INTERVAL=ALERT_INTERVAL,
                               **settings)
        log = open(tmp_path / f"gunicorn-{len(servers)}.log", "w+")
        server = subprocess.Popen([sys.executable, "-m", "gunicorn", *args, target], cwd=ROOT, env=env,
                                  stdout=log, stderr=subprocess.STDOUT)
        servers.append((server, log))
        base = f"http://127.0.0.1:{port}"
        wait_for(lambda: get(base + health)[0] == 200, message="gunicorn to answer")
        return base

    yield spawn
    for server, log in servers:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)
        log.close()


def events(receiver):
    return [(post["jobsweb"]["event"], post["jobsweb"]["kind"]) for post in receiver.posts]


def test_with_only_gunicorn_running_an_overdue_definition_opens_its_incident_and_the_webhook_fires_within_60_seconds(
        app, sql, receiver, spawn_web, spawn_worker):
    define(app, "nightly")
    sql("UPDATE job_definitions SET next_run_at = now() - interval '10 minutes'")
    assert sql("SELECT count(*) FROM job_workers") == [(0,)]

    spawn_web(JOBSWEB_ALERT_WEBHOOK_URL=receiver.url)
    # From the moment gunicorn answers: its start (two interpreters importing the app, 20 s and
    # more on a loaded machine) is the machine's, not the alerting's.
    started = time.monotonic()
    wait_for(lambda: receiver.posts, timeout=60, message="the overdue incident's webhook")
    assert time.monotonic() - started < 60
    assert events(receiver) == [("opened", "overdue")]
    assert "nightly is overdue" in receiver.texts()[0]
    assert sql("SELECT kind, resolved_at FROM jobsweb_alert_incidents") == [("overdue", None)]

    # A worker comes back and runs the slot: one incident, opened once and resolved once,
    # although two web processes and the worker all evaluate.
    assert finish(spawn_worker(JOBSWEB_ALERT_WEBHOOK_URL=receiver.url))[0] == 0
    wait_for(lambda: len(receiver.posts) == 2, timeout=60, message="the resolution's webhook")
    assert events(receiver) == [("opened", "overdue"), ("resolved", "overdue")]
    assert sql("SELECT count(*), count(resolved_at) FROM jobsweb_alert_incidents") == [(1, 1)]
    # Marked sent once the receiver's answer is read, a moment after the receiver has the post.
    wait_for(lambda: sql("SELECT count(*) FROM jobsweb_alert_deliveries WHERE status = 'sent'") == [(2,)],
             message="both deliveries marked sent")


def test_a_team_app_under_gunicorn_preload_opens_and_resolves_the_no_worker_incident(
        app, sql, receiver, spawn_web, spawn_worker):
    sql("INSERT INTO job_workers (id, host, pid, last_seen_at, stopped_at) "
        "VALUES ('old:1:a', 'old', 1, now() - interval '1 hour', now() - interval '1 hour')")
    with committed(app):
        run_id = enqueue("jobsweb.noop")
    # --preload builds the app in gunicorn's master, whose thread evaluates; the forked
    # processes serving requests must not share its pooled connections (/healthz uses one).
    base = spawn_web("examples.host_app:create_app()", "--preload", health="/admin/jobs/healthz",
                     JOBSWEB_ALERT_WEBHOOK_URL=receiver.url, JOBSWEB_NO_WORKER_MINUTES="0.05")
    wait_for(lambda: receiver.posts, timeout=60, message="the no_worker incident's webhook")
    assert events(receiver) == [("opened", "no_worker")]
    text = receiver.texts()[0]
    assert "Runs are due" in text and "no worker has been seen since" in text
    for _ in range(20):
        assert get(base + "/admin/jobs/healthz")[0] == 200

    # Every process has the same settings; whichever evaluates first queues the notification.
    assert finish(spawn_worker(JOBSWEB_ALERT_WEBHOOK_URL=receiver.url))[0] == 0
    assert sql("SELECT status FROM job_runs WHERE id = %s", [run_id]) == [("succeeded",)]
    wait_for(lambda: len(receiver.posts) == 2, timeout=60, message="the resolution's webhook")
    assert events(receiver) == [("opened", "no_worker"), ("resolved", "no_worker")]
    [(resolution,)] = sql("SELECT resolution FROM jobsweb_alert_incidents")
    assert resolution.startswith("worker ") and " was seen at " in resolution


def test_a_run_past_its_definitions_max_duration_opens_a_slow_incident_that_clears_when_it_ends(
        app, sql, receiver, spawn_worker):
    definition_id = define(app, "slowpoke", job_type="jobsweb.sleep", payload={"seconds": 3}, max_duration=1)
    with committed(app):
        run_id = definitions.run_now("slowpoke")
    worker = spawn_worker("--forever", "--poll-interval", "0.05", JOBSWEB_ALERT_INTERVAL="0.2",
                          JOBSWEB_ALERT_WEBHOOK_URL=receiver.url)
    wait_for(lambda: len(receiver.posts) == 2, message="the slow incident to open and clear")
    worker.send_signal(signal.SIGTERM)
    assert finish(worker)[0] == 0

    assert events(receiver) == [("opened", "slow"), ("resolved", "slow")]
    assert "slowpoke: run" in receiver.texts()[0] and "longer than its maximum duration (1 s)" in receiver.texts()[0]
    [(kind, incident_definition, incident_run, opened_while_running, resolution)] = sql(
        "SELECT i.kind, i.definition_id, i.run_id, i.opened_at < r.finished_at, i.resolution "
        "FROM jobsweb_alert_incidents i JOIN job_runs r ON r.id = i.run_id")
    assert (kind, incident_definition, incident_run) == ("slow", definition_id, run_id)
    assert opened_while_running and resolution == f"run {run_id} ended succeeded"


def seed_history(sql, definition_id, seconds, runs=20):
    sql("INSERT INTO job_runs (definition_id, job_type, status, attempts, started_at, finished_at) "
        "SELECT %s, 'jobsweb.noop', 'succeeded', 1, now() - interval '1 day' + make_interval(mins => n), "
        "now() - interval '1 day' + make_interval(mins => n, secs => %s) FROM generate_series(1, %s) n",
        [definition_id, seconds, runs])


def running_since(sql, definition_id, seconds):
    return sql("INSERT INTO job_runs (definition_id, job_type, status, attempts, locked_by, locked_until, started_at) "
               "VALUES (%s, 'jobsweb.noop', 'running', 1, 'elsewhere', now() + interval '1 hour', "
               "now() - make_interval(secs => %s)) RETURNING id", [definition_id, seconds])[0][0]


def test_without_a_max_duration_a_run_is_slow_after_three_times_the_p95_of_its_last_successes_and_at_least_a_minute(
        app, sql):
    typical, steady, new, quick = (define(app, name) for name in ("typical", "steady", "new", "quick"))
    seed_history(sql, typical, 100)  # slow after 300 s
    seed_history(sql, steady, 200)  # slow after 600 s
    seed_history(sql, quick, 1)  # 3 s, so the floor: slow after 60 s
    slow_run = running_since(sql, typical, 400)
    running_since(sql, steady, 400)
    running_since(sql, new, 3600)  # no successful run to go by: never slow
    quick_run = running_since(sql, quick, 90)

    with app.app_context():
        opened, _ = alerts.evaluate()
        assert alerts.evaluate() == ([], [])
    rows = sql("SELECT subject, run_id, resolved_at, summary FROM jobsweb_alert_incidents ORDER BY subject")
    assert [row[:3] for row in rows] == [("quick", quick_run, None), ("typical", slow_run, None)]
    assert len(opened) == 2
    assert "longer than 3x the p95 of its last successful runs, at least 60 s (60 s)" in rows[0][3]
    assert "(300 s)" in rows[1][3]

    [(typical_incident,)] = sql("SELECT id FROM jobsweb_alert_incidents WHERE subject = 'typical'")
    sql("UPDATE job_runs SET status = 'dead', finished_at = now() WHERE id = %s", [slow_run])
    with app.app_context():
        assert alerts.evaluate() == ([], [typical_incident])
    assert sql("SELECT subject, resolution FROM jobsweb_alert_incidents WHERE resolved_at IS NOT NULL") == [
        ("typical", f"run {slow_run} ended dead")]


def test_no_worker_opens_only_when_runs_are_due_and_resolves_when_a_worker_is_seen(app, sql):
    app.config["JOBSWEB_NO_WORKER_MINUTES"] = 1
    sql("INSERT INTO job_workers (id, host, pid, last_seen_at) VALUES ('w:1:a', 'w', 1, now() - interval '2 minutes')")
    with app.app_context():
        assert alerts.evaluate() == ([], [])  # nothing is due
    with committed(app):
        enqueue("jobsweb.noop")
    with app.app_context():
        [opened], _ = alerts.evaluate()
        assert alerts.evaluate() == ([], [])
    [(kind, subject, summary)] = sql("SELECT kind, subject, summary FROM jobsweb_alert_incidents")
    assert (kind, subject) == ("no_worker", "workers") and "(more than 1 minutes)" in summary

    sql("UPDATE job_workers SET last_seen_at = now()")
    with app.app_context():
        assert alerts.evaluate() == ([], [opened])


def test_no_worker_waits_the_whole_window_when_no_worker_was_ever_seen(app, sql):
    app.config["JOBSWEB_NO_WORKER_MINUTES"] = 1
    with committed(app):
        run_id = enqueue("jobsweb.noop")
    with app.app_context():
        assert alerts.evaluate() == ([], [])
    sql("UPDATE job_runs SET run_at = now() - interval '2 minutes' WHERE id = %s", [run_id])
    with app.app_context():
        [_], _ = alerts.evaluate()
    assert "no worker has been seen ever" in sql("SELECT summary FROM jobsweb_alert_incidents")[0][0]


def test_the_thread_starts_only_in_a_serving_process_and_not_when_switched_off(database_url_for_tests):
    def build(**config):
        return create_app({"SQLALCHEMY_DATABASE_URI": database_url_for_tests, "SECRET_KEY": SECRET_KEY,
                           "JOBSWEB_WEB_ALERTS": True, **config})

    serving = build().extensions["jobsweb_web_alerts"]
    assert serving.thread.is_alive()
    serving.stop()
    assert not serving.thread.is_alive()
    assert build(TESTING=True).extensions["jobsweb_web_alerts"] is None
    assert build(JOBSWEB_WEB_ALERTS=False).extensions["jobsweb_web_alerts"] is None
    with click.Context(click.Command("jobs")):  # as in `flask jobs migrate`
        assert build().extensions["jobsweb_web_alerts"] is None


@pytest.mark.parametrize("raw", ["0", "-1", "five", "10081"])
def test_a_bad_no_worker_window_stops_start_up_naming_the_variable(raw):
    with pytest.raises(ConfigError, match="JOBSWEB_NO_WORKER_MINUTES"):
        from_environment({"JOBSWEB_NO_WORKER_MINUTES": raw})


def test_flask_jobs_define_takes_a_max_duration_and_refuses_a_bad_one(app, runner, sql):
    result = runner.invoke(args=["jobs", "define", "nightly", "--type", "jobsweb.noop", "--schedule", "@daily",
                                 "--max-duration", "90"])
    assert result.exit_code == 0, result.output
    assert sql("SELECT max_duration_seconds FROM job_definitions") == [(90,)]
    result = runner.invoke(args=["jobs", "define", "nightly", "--type", "jobsweb.noop", "--schedule", "@daily",
                                 "--max-duration", "0"])
    assert result.exit_code == 2 and "max_duration" in result.output
    assert sql("SELECT max_duration_seconds FROM job_definitions") == [(90,)]


def test_the_incidents_page_and_dashboard_name_the_new_kinds_and_link_what_they_are_about(app, sql, sign_in):
    app.config["JOBSWEB_NO_WORKER_MINUTES"] = 1
    slow = define(app, "slowpoke", max_duration=60)
    run_id = running_since(sql, slow, 120)
    with committed(app):
        enqueue("jobsweb.noop")
    sql("UPDATE job_runs SET run_at = now() - interval '2 minutes' WHERE status = 'queued'")
    with app.app_context():
        assert len(alerts.evaluate()[0]) == 2
    client = sign_in("viewer")
    for page in ("/incidents", "/"):
        html = client.get(page).get_data(as_text=True)
        assert '<span class="badge s-dead">no worker</span>' in html and '<a href="/workers">workers</a>' in html
        assert '<span class="badge s-dead">slow</span>' in html
        assert f'<a href="/runs/{run_id}">Run {run_id}</a>' in html


def test_the_thread_has_stopped_when_weakrefs_exit_hook_runs(database_url_for_tests):
    # SQLAlchemy's pool makes a weakref.finalize per connection it hands out, and weakref's exit
    # hook failed ("dictionary changed size during iteration") when the thread checked one out
    # during it: a traceback at a gunicorn worker's exit.
    script = f"""
import weakref
from jobsweb import create_app
app = create_app({{"SQLALCHEMY_DATABASE_URI": {database_url_for_tests!r}, "SECRET_KEY": {SECRET_KEY!r},
                  "JOBSWEB_WEB_ALERTS": True}})
thread = app.extensions["jobsweb_web_alerts"].thread
weakref.finalize(thread, lambda: print("at weakref's exit hook the thread is", "alive" if thread.is_alive() else "stopped"))
"""
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert "at weakref's exit hook the thread is stopped" in done.stdout, done.stdout + done.stderr
