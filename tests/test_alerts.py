"""Alerts: incidents open once and resolve once, notifications reach a real webhook receiver
on loopback and a real SMTP server (aiosmtpd), failed sends are retried, and concurrent
worker processes open one incident and send one notification."""

import socket

import psycopg
import pytest
from aiosmtpd.controller import Controller

from jobsweb import definitions, enqueue
from jobsweb.ops import alerts, notify
from jobsweb.core.errors import ConfigError
from jobsweb.core.settings import check, from_environment
from jobsweb.commands import build_worker
from tests.alert_receivers import Mailbox, Receiver
from jobsweb.core.database import libpq_url
from tests.conftest import committed
from tests.conftest import define as define_committed, wait_for
from tests.processes import stop_cost, stopped


@pytest.fixture
def smtp_sink():
    mailbox = Mailbox()
    with socket.socket() as probe:  # aiosmtpd's start() connects to its port, so it needs a real one
        probe.bind(("127.0.0.1", 0))
        mailbox.port = probe.getsockname()[1]
    controller = Controller(mailbox, hostname="127.0.0.1", port=mailbox.port)
    controller.start()
    yield mailbox
    controller.stop()


@pytest.fixture
def alerting(app, receiver):
    """The app with the receiver as its default webhook."""
    app.config["JOBSWEB_ALERT_WEBHOOK_URL"] = receiver.url
    return app


def define(app, name="nightly", **kwargs):
    return define_committed(app, name, **kwargs)


def evaluate(app):
    with app.app_context():
        return alerts.evaluate()


def deliver(app):
    with app.app_context():
        return notify.deliver_due()


def run_worker(app):
    """One cron tick in this process: run until nothing is due."""
    build_worker(app, concurrency=2, poll_interval=0.05, shutdown_timeout=1).run()


def make_overdue(sql, name="nightly"):
    sql("UPDATE job_definitions SET next_run_at = now() - interval '1 hour' WHERE name = %s", (name,))


def test_an_overdue_definition_opens_one_incident_and_notifies_once_however_often_it_is_evaluated(alerting, receiver, sql):
    define(alerting)
    make_overdue(sql)
    opened, _ = evaluate(alerting)
    assert evaluate(alerting) == ([], [])
    assert deliver(alerting) == 1
    assert deliver(alerting) == 0
    [text] = receiver.texts()
    assert "nightly is overdue" in text and "Is cron or a worker running?" in text
    assert receiver.posts[0]["jobsweb"]["kind"] == "overdue"
    assert sql("SELECT id, kind, resolved_at FROM jobsweb_alert_incidents") == [(opened[0], "overdue", None)]


def test_the_next_success_resolves_the_incident_with_one_recovery_notification(alerting, receiver, sql):
    define(alerting)
    make_overdue(sql)
    evaluate(alerting)
    run_worker(alerting)  # the tick comes back: materialises the overdue slot and runs it
    _, resolved = evaluate(alerting)
    assert len(resolved) == 1
    assert evaluate(alerting) == ([], [])
    deliver(alerting)
    texts = receiver.texts()
    assert len(texts) == 2
    assert "overdue" in texts[0] and texts[1].startswith("Resolved: nightly is overdue")
    [(resolution,)] = sql("SELECT resolution FROM jobsweb_alert_incidents WHERE resolved_at IS NOT NULL")
    assert resolution.endswith("succeeded")


def test_a_definition_alerts_when_its_dead_runs_in_a_row_reach_its_own_threshold(alerting, receiver, sql):
    define(alerting, job_type="jobsweb.fail", payload={"permanent": True}, alert_after_failures=3)
    for _ in range(2):
        with committed(alerting):
            definitions.run_now("nightly")
        run_worker(alerting)
    assert evaluate(alerting) == ([], [])
    with committed(alerting):
        definitions.run_now("nightly")
    run_worker(alerting)
    opened, _ = evaluate(alerting)
    assert len(opened) == 1
    deliver(alerting)
    [text] = receiver.texts()
    assert "nightly has failed its last 3 runs" in text and "PermanentError" in text
    # A single dead run of a definition under its threshold opens nothing of kind 'dead'.
    assert sql("SELECT kind FROM jobsweb_alert_incidents") == [("failing",)]


def test_dead_runs_of_one_job_type_share_an_incident_until_none_of_them_is_dead(alerting, receiver, sql):
    from jobsweb.engine.runs import run_actions

    with committed(alerting):
        enqueue("jobsweb.fail", {"permanent": True})
        enqueue("jobsweb.fail", {"permanent": True})
    run_worker(alerting)
    opened, _ = evaluate(alerting)
    with committed(alerting):
        enqueue("jobsweb.fail", {"permanent": True})
    run_worker(alerting)
    assert evaluate(alerting) == ([], [])  # counted into the open incident, not a new alert
    assert sql("SELECT run_count FROM jobsweb_alert_incidents") == [(3,)]

    # Another run of the type succeeding says nothing of these three, which are still dead.
    with committed(alerting):
        enqueue("jobsweb.fail", {"times": 0})
    run_worker(alerting)
    assert evaluate(alerting) == ([], [])
    # Fixed and retried: the incident clears once the last of them is no longer dead.
    sql("UPDATE job_runs SET payload = '{\"times\": 0}' WHERE status = 'dead'")
    with committed(alerting):
        run_actions.retry([1, 2])
    run_worker(alerting)
    assert evaluate(alerting) == ([], [])
    with committed(alerting):
        run_actions.retry([3])
    _, resolved = evaluate(alerting)
    assert resolved == opened
    assert sql("SELECT resolution FROM jobsweb_alert_incidents") == [("none of its 3 runs is dead any more",)]
    with committed(alerting):
        enqueue("jobsweb.fail", {"permanent": True})
    run_worker(alerting)
    reopened, _ = evaluate(alerting)
    assert len(reopened) == 1 and reopened != opened

    deliver(alerting)
    texts = receiver.texts()
    assert [t.split(":")[0] for t in texts] == ["run 1 of jobsweb.fail is dead after 1 attempt", "Resolved",
                                                "run 5 of jobsweb.fail is dead after 1 attempt"]
    assert "(1 more jobsweb.fail run died with it)" in texts[0]


def test_a_failed_delivery_is_retried_and_its_error_stays_visible(alerting, receiver, sql):
    alerting.config["JOBSWEB_ALERT_RETRY_BASE"] = 0.01
    receiver.fail_first = 1
    with committed(alerting):
        notify.queue_test("ann@example.com")
    assert deliver(alerting) == 0
    [(status, attempts, error)] = sql("SELECT status, attempts, last_error FROM jobsweb_alert_deliveries")
    assert (status, attempts, error) == ("pending", 1, "HTTP 500 Internal Server Error: receiver is down")
    wait_for(lambda: deliver(alerting), timeout=5, message="the retry")
    assert sql("SELECT status, attempts FROM jobsweb_alert_deliveries") == [("sent", 2)]
    assert len(receiver.posts) == 2


def test_a_delivery_gives_up_after_its_last_attempt(alerting, receiver, sql):
    alerting.config.update(JOBSWEB_ALERT_RETRY_BASE=0.01, JOBSWEB_ALERT_MAX_ATTEMPTS=2)
    receiver.fail_first = 99
    with committed(alerting):
        notify.queue_test("ann@example.com")
    wait_for(lambda: deliver(alerting) == 0 and sql("SELECT status FROM jobsweb_alert_deliveries") == [("failed",)],
             timeout=5, message="the delivery to give up")
    assert sql("SELECT attempts FROM jobsweb_alert_deliveries") == [(2,)]


def test_an_unreachable_webhook_is_an_error_not_a_crash(app, sql):
    app.config["JOBSWEB_ALERT_WEBHOOK_URL"] = "http://127.0.0.1:9/nothing-listens-here"
    with committed(app):
        notify.queue_test("ann@example.com")
    assert deliver(app) == 0
    [(error,)] = sql("SELECT last_error FROM jobsweb_alert_deliveries")
    assert error.startswith("could not POST to http://127.0.0.1:9/…")


def test_a_webhook_url_with_a_non_ascii_path_is_sent_percent_encoded(alerting, receiver, sql):
    alerting.config.update(JOBSWEB_ALERT_WEBHOOK_URL=receiver.url + "/ü?x=ä%2F", JOBSWEB_ALERT_ALLOW_PRIVATE_IPS=True)
    with committed(alerting):
        notify.queue_test("ann@example.com")
    assert deliver(alerting) == 1
    assert receiver.paths == ["/hooks/secret-token/%C3%BC?x=%C3%A4%2F"]


def test_any_exception_in_a_send_records_the_delivery_as_failed_and_waits_to_retry(app, sql):
    app.config.update(JOBSWEB_ALERT_WEBHOOK_URL="http://127.0.0.1:9/x", JOBSWEB_ALERT_RETRY_BASE=60)
    with committed(app):
        notify.queue_test("ann@example.com")
    # A row from before define() checked URLs: urlsplit raises ValueError, not a SendError.
    sql("UPDATE jobsweb_alert_deliveries SET target = 'http://[::1/x'")
    assert deliver(app) == 0
    [(status, attempts, error, waits)] = sql("SELECT status, attempts, last_error, next_attempt_at > now() + "
                                            "interval '30 seconds' FROM jobsweb_alert_deliveries")
    assert (status, attempts, error, waits) == ("pending", 1, "ValueError: Invalid IPv6 URL", True)
    assert deliver(app) == 0  # not again at once: its backoff has not passed
    assert sql("SELECT attempts FROM jobsweb_alert_deliveries") == [(1,)]


def test_email_alerts_reach_an_smtp_server(app, smtp_sink, sql):
    app.config.update(JOBSWEB_SMTP_HOST="127.0.0.1", JOBSWEB_SMTP_PORT=smtp_sink.port,
                      JOBSWEB_SMTP_STARTTLS=False, JOBSWEB_ALERT_EMAIL_TO=["ops@example.com", "oncall@example.com"],
                      JOBSWEB_SMTP_FROM="jobs@example.com")
    define(app)
    make_overdue(sql)
    evaluate(app)
    assert deliver(app) == 1
    [(recipients, content)] = smtp_sink.messages
    assert recipients == ["ops@example.com", "oncall@example.com"]
    assert "Subject: jobsweb ALERT: nightly is overdue" in content and "From: jobs@example.com" in content


def test_a_definition_with_its_own_webhook_alerts_there_instead_of_the_default(alerting, receiver, sql):
    own = Receiver()
    try:
        define(alerting, alert_webhook_url=own.url)
        make_overdue(sql)
        evaluate(alerting)
        deliver(alerting)
        assert len(own.texts()) == 1 and receiver.texts() == []
    finally:
        own.close()


def test_concurrent_worker_processes_open_one_incident_and_send_one_notification(app, receiver, sql, spawn_worker):
    sql("INSERT INTO job_runs (job_type, status, attempts, finished_at, last_error, error_type) "
        "VALUES ('send_invoice', 'dead', 5, now(), 'SMTP refused', 'RuntimeError')")
    workers = [spawn_worker(JOBSWEB_ALERT_WEBHOOK_URL=receiver.url) for _ in range(4)]
    for proc in workers:
        assert proc.wait(timeout=60) == 0, proc.stdout.read()
    assert sql("SELECT kind, job_type, run_count FROM jobsweb_alert_incidents") == [("dead", "send_invoice", 1)]
    assert sql("SELECT status, attempts FROM jobsweb_alert_deliveries") == [("sent", 1)]
    [text] = receiver.texts()
    assert text.startswith("run 1 of send_invoice is dead after 5 attempts: RuntimeError: SMTP refused")


def test_webhook_text_is_escaped_for_slack(alerting, receiver, sql):
    sql("INSERT INTO job_runs (job_type, status, attempts, finished_at, last_error) "
        "VALUES ('x', 'dead', 1, now(), '<!channel> & more')")
    evaluate(alerting)
    deliver(alerting)
    assert "&lt;!channel&gt; &amp; more" in receiver.texts()[0]
    assert receiver.posts[0]["jobsweb"]["summary"].endswith("<!channel> & more.")


@pytest.mark.parametrize("settings, message", [
    ({"JOBSWEB_SMTP_PORT": "smtp"}, "JOBSWEB_SMTP_PORT must be a whole number"),
    ({"JOBSWEB_SMTP_PORT": "70000"}, "JOBSWEB_SMTP_PORT must be a port number"),
    ({"JOBSWEB_SMTP_STARTTLS": "maybe"}, "JOBSWEB_SMTP_STARTTLS must be true or false"),
    ({"JOBSWEB_ALERT_WEBHOOK_URL": "hooks.slack.com/x"}, "JOBSWEB_ALERT_WEBHOOK_URL must be an http"),
    ({"JOBSWEB_ALERT_EMAIL_TO": "ops@example.com, nobody"}, "JOBSWEB_ALERT_EMAIL_TO must be comma-separated"),
])
def test_a_bad_alert_setting_stops_start_up_naming_the_variable(settings, message):
    with pytest.raises(ConfigError, match=message):
        from_environment(settings)


def test_email_recipients_without_an_smtp_server_are_refused():
    with pytest.raises(ConfigError, match="JOBSWEB_ALERT_EMAIL_TO needs JOBSWEB_SMTP_HOST"):
        check(from_environment({"JOBSWEB_ALERT_EMAIL_TO": "ops@example.com"}))


def test_the_database_refuses_a_second_open_incident_for_a_definition(app, sql):
    import psycopg

    define(app)
    insert = ("INSERT INTO jobsweb_alert_incidents (kind, definition_id, subject, summary, since) "
              "SELECT 'overdue', id, name, 'x', now() FROM job_definitions")
    sql(insert)
    with pytest.raises(psycopg.errors.UniqueViolation):
        sql(insert)


def test_an_evaluation_skips_its_turn_while_another_worker_evaluates(alerting, sql, database_url_for_tests):
    import psycopg

    from jobsweb.core.database import libpq_url

    define(alerting)
    make_overdue(sql)
    with psycopg.connect(libpq_url(database_url_for_tests)) as other:
        other.execute("SELECT pg_advisory_xact_lock(%s)", (alerts.LOCK_KEY,))
        assert evaluate(alerting) is None
    assert len(evaluate(alerting)[0]) == 1


def test_a_pass_sends_every_due_delivery_when_the_table_was_analysed_at_one_row(alerting, receiver, sql):
    # What autoanalyze leaves after a quiet spell: one row in one page. The claim's planner then
    # scanned the table outside and ran the claim's subquery for each row: the first pass took
    # all three, sent one, and left two to wait out their 60 s lease.
    insert = ("INSERT INTO jobsweb_alert_deliveries (event, channel, target, subject, body, data) "
              "VALUES ('test', 'webhook', %s, 'subject', %s, '{}')")
    sql(insert, (receiver.url, "first"))
    sql("ANALYZE jobsweb_alert_deliveries")
    for body in ("second", "third"):
        sql(insert, (receiver.url, body))
    assert deliver(alerting) == 3
    assert receiver.texts() == ["first", "second", "third"]
    assert sql("SELECT status, attempts FROM jobsweb_alert_deliveries ORDER BY id") == [("sent", 1)] * 3


def test_deleting_a_definition_closes_its_incident_with_one_notification(alerting, receiver, sql):
    define(alerting)
    make_overdue(sql)
    evaluate(alerting)
    sql("DELETE FROM job_definitions")
    assert len(evaluate(alerting)[1]) == 1
    deliver(alerting)
    assert receiver.texts()[1].startswith("Resolved: nightly is overdue") and "the definition was deleted" in receiver.texts()[1]


def test_the_define_command_sets_the_alert_threshold_and_routing(runner, sql):
    result = runner.invoke(args=["jobs", "define", "nightly", "--type", "jobsweb.noop", "--schedule", "@daily",
                                 "--alert-after", "1", "--alert-webhook", "https://hooks.example.com/x"])
    assert result.exit_code == 0, result.output
    assert sql("SELECT alert_after_failures, alert_webhook_url FROM job_definitions") == [(1, "https://hooks.example.com/x")]
    result = runner.invoke(args=["jobs", "define", "nightly", "--type", "jobsweb.noop", "--schedule", "@daily",
                                 "--alert-after", "0"])
    assert result.exit_code == 2 and "alert_after_failures: must be a whole number from 1 to 1000" in result.output


def test_a_dead_run_retried_by_an_operator_that_dies_again_alerts_again(alerting, receiver, sql):
    from jobsweb.engine.runs import run_actions

    with committed(alerting):
        run_id = enqueue("jobsweb.fail", {"permanent": True})
    run_worker(alerting)
    evaluate(alerting)
    with committed(alerting):
        run_actions.retry([run_id])
    assert len(evaluate(alerting)[1]) == 1  # its one run is queued again, not dead
    run_worker(alerting)
    reopened, _ = evaluate(alerting)
    assert len(reopened) == 1
    assert sql("SELECT run_id, attempt FROM jobsweb_alert_incident_runs ORDER BY attempt") == [(run_id, 1), (run_id, 2)]


def test_a_run_that_waits_queued_past_its_grace_makes_its_definition_overdue_until_it_succeeds(alerting, receiver, sql):
    definition_id = define(alerting, grace_seconds=60)
    sql("INSERT INTO job_runs (definition_id, job_type, run_at) VALUES (%s, 'jobsweb.noop', now() - interval '2 minutes')",
        (definition_id,))
    opened, _ = evaluate(alerting)
    assert len(opened) == 1
    run_worker(alerting)  # a worker that handles the job type comes along
    assert evaluate(alerting)[1] == opened
    deliver(alerting)
    first, second = receiver.texts()
    assert "its run 1" in first and "No worker seen in the last hour handles job type jobsweb.noop" in first
    assert second.startswith("Resolved: nightly is overdue")


def test_a_run_queued_behind_its_running_predecessor_is_not_stuck(alerting, sql):
    definition_id = define(alerting, grace_seconds=60)
    sql("INSERT INTO job_runs (definition_id, job_type, status, run_at) VALUES (%s, 'jobsweb.sleep', 'running', now())",
        (definition_id,))
    sql("INSERT INTO job_runs (definition_id, job_type, run_at, after_run_id) "
        "VALUES (%s, 'jobsweb.noop', now() - interval '2 minutes', 1)", (definition_id,))
    assert evaluate(alerting) == ([], [])


def test_a_one_shot_worker_sends_the_notification_of_the_incident_it_opened_before_it_exits(app, receiver, sql, spawn_worker):
    sql("INSERT INTO job_runs (job_type, status, attempts, finished_at) VALUES ('send_invoice', 'dead', 1, now())")
    proc = spawn_worker(JOBSWEB_ALERT_WEBHOOK_URL=receiver.url)
    assert proc.wait(timeout=60) == 0, proc.stdout.read()
    assert len(receiver.texts()) == 1
    assert sql("SELECT status FROM jobsweb_alert_deliveries") == [("sent",)]


def test_an_alert_email_for_a_name_stored_with_a_line_break_is_still_sent(app, smtp_sink, sql):
    from jobsweb.core.database import db
    from jobsweb.core.models import AlertDelivery

    app.config.update(JOBSWEB_SMTP_HOST="127.0.0.1", JOBSWEB_SMTP_PORT=smtp_sink.port, JOBSWEB_SMTP_STARTTLS=False)
    with committed(app):
        db.session.add(AlertDelivery(event="test", channel="email", target="ops@example.com",
                                     subject="nightly\r\nBcc: all@example.com is overdue", body="b", data={}))
    with app.app_context():
        assert notify.deliver_due() == 1
    [(recipients, message)] = smtp_sink.messages
    assert "Subject: nightly Bcc: all@example.com is overdue" in message and "\nBcc:" not in message


def test_an_open_dead_incident_says_how_many_attempts_the_newest_death_took(alerting, sql):
    from jobsweb.engine.runs import run_actions

    with committed(alerting):
        run_id = enqueue("jobsweb.fail", {"permanent": True})
        enqueue("jobsweb.fail", {"permanent": True})  # still dead: the incident stays open
    run_worker(alerting)
    evaluate(alerting)
    assert sql("SELECT summary FROM jobsweb_alert_incidents")[0][0].startswith(
        f"run {run_id} of jobsweb.fail is dead after 1 attempt:")
    with committed(alerting):
        run_actions.retry([run_id])
    run_worker(alerting)
    assert evaluate(alerting) == ([], [])  # counted into the incident still open
    [(summary, count)] = sql("SELECT summary, run_count FROM jobsweb_alert_incidents")
    assert summary.startswith(f"run {run_id} of jobsweb.fail is dead after 2 attempts:") and count == 3


def test_deleting_a_failing_definition_does_not_move_its_dead_runs_into_the_ad_hoc_incident(alerting, sql):
    define(alerting, job_type="jobsweb.fail", payload={"permanent": True}, alert_after_failures=1)
    with committed(alerting):
        definitions.run_now("nightly")
    run_worker(alerting)
    evaluate(alerting)
    assert sql("SELECT kind, resolved_at IS NULL FROM jobsweb_alert_incidents") == [("failing", True)]
    [(definition_id,)] = sql("SELECT id FROM job_definitions")
    with committed(alerting):
        from jobsweb.core.database import db
        from jobsweb.core.models import JobDefinition

        definitions.delete(db.session.get(JobDefinition, definition_id))
    evaluate(alerting)
    assert sql("SELECT kind, resolved_at IS NULL FROM jobsweb_alert_incidents") == [("failing", False)]
    assert sql("SELECT definition_id, deleted_definition, status FROM job_runs") == [(None, "nightly", "dead")]


def test_a_definition_that_failed_its_last_run_says_run_not_runs(alerting, receiver, sql):
    define(alerting, job_type="jobsweb.fail", payload={"permanent": True}, alert_after_failures=1)
    with committed(alerting):
        definitions.run_now("nightly")
    run_worker(alerting)
    evaluate(alerting)
    deliver(alerting)
    [text] = receiver.texts()
    assert "nightly has failed its last run;" in text and "1 runs" not in text


def test_pausing_a_definition_closes_its_overdue_incident_with_one_notification(alerting, receiver, sql):
    # README, "Alerts": "pausing one closes an overdue incident".
    define(alerting)
    make_overdue(sql)
    [opened], _ = evaluate(alerting)
    with committed(alerting):
        definitions.pause("nightly")
    assert evaluate(alerting) == ([], [opened])
    assert sql("SELECT resolved_at IS NOT NULL FROM jobsweb_alert_incidents") == [(True,)]
    deliver(alerting)
    assert receiver.texts()[1].startswith("Resolved: nightly is overdue") and "the definition was paused" in receiver.texts()[1]


def test_a_worker_told_to_stop_while_its_alert_pass_waits_exits_by_its_deadline(app, sql, spawn_worker,
                                                                                 database_url_for_tests):
    # The alert pass runs on the worker's loop thread, on a connection of its own: a lock (or a
    # slow link) that held it held the stop too, past the deadline, for its round trips' own 10 s
    # bounds each (24 s after SIGTERM on a link 500 ms slow each way). SIGTERM cuts it at once.
    # The same worker stopped with no lock in its way first: the deadline is held beyond its exit,
    # which is the machine's at its present load.
    idle = stop_cost(sql, spawn_worker("--forever", "--shutdown-timeout", "2"))
    with psycopg.connect(libpq_url(database_url_for_tests)) as locker:
        locker.execute("LOCK TABLE jobsweb_alert_incidents IN ACCESS EXCLUSIVE MODE")
        proc = spawn_worker("--forever", "--shutdown-timeout", "2")
        wait_for(lambda: sql("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                             "AND query LIKE '%%jobsweb_alert_incidents%%'")[0][0] == 1,
                 message="the worker's alert pass to wait for the lock")
        code, output, took = stopped(proc)
        locker.rollback()
    assert code == 0, output
    # The shutdown timeout and 2 s (docs/REFERENCE.md).
    assert took - idle <= 4.0, f"{took:.1f} s, {idle:.1f} s with no lock in its way\n{output}"
    assert "alerts: database unavailable" not in output and "Traceback" not in output, output
