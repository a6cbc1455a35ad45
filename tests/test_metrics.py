import pytest
from prometheus_client.parser import text_string_to_metric_families

from jobsweb import create_app

TOKEN = "s3cret-metrics-token-0123456789"


@pytest.fixture
def metrics_app(app, monkeypatch, database_url_for_tests):
    monkeypatch.setenv("JOBSWEB_METRICS_TOKEN", TOKEN)
    return create_app({"SQLALCHEMY_DATABASE_URI": database_url_for_tests, "TESTING": True, "SECRET_KEY": "0123456789abcdef-test-secret-key-0123456789-x"})


def scrape(app, token=TOKEN):
    response = app.test_client().get("/metrics", headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 200, response.get_data(as_text=True)
    assert response.content_type.startswith("text/plain; version=")
    samples = {}
    for family in text_string_to_metric_families(response.get_data(as_text=True)):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples


def test_metrics_is_not_there_without_a_token_setting(client):
    assert client.get("/metrics", headers={"Authorization": "Bearer anything-at-all-here"}).status_code == 404


@pytest.mark.parametrize("header", [None, "Bearer wrong-token-of-some-length", f"Basic {TOKEN}", TOKEN])
def test_metrics_refuses_a_missing_or_wrong_token(metrics_app, header):
    headers = {"Authorization": header} if header else {}
    response = metrics_app.test_client().get("/metrics", headers=headers)
    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"].startswith("Bearer")
    assert "jobsweb_runs" not in response.get_data(as_text=True)


def test_metrics_report_runs_queue_definitions_durations_and_workers(metrics_app, sql):
    sql("INSERT INTO job_runs (job_type, status, run_at) SELECT 'jobsweb.noop', 'queued', now() - interval '90 seconds' "
        "FROM generate_series(1, 3)")
    sql("INSERT INTO job_runs (job_type, status, run_at) VALUES ('jobsweb.noop', 'queued', now() + interval '1 hour'), "
        "('nobody.handles.this', 'queued', now() - interval '10 seconds')")
    sql("INSERT INTO job_runs (job_type, status, finished_at) VALUES ('jobsweb.sleep', 'succeeded', now()), "
        "('jobsweb.sleep', 'succeeded', now()), ('jobsweb.fail', 'dead', now())")
    sql("INSERT INTO job_attempts (run_id, attempt, outcome, started_at, finished_at) VALUES "
        "(6, 1, 'succeeded', now() - interval '0.2 seconds', now()), "
        "(7, 1, 'succeeded', now() - interval '40 seconds', now()), "
        "(8, 1, 'failed', now() - interval '3 seconds', now()), "
        "(8, 2, 'interrupted', now() - interval '3 seconds', now())")
    sql("INSERT INTO job_workers (id, host, pid, last_seen_at, job_types) VALUES "
        "('h:1:a', 'h', 1, now() - interval '5 seconds', '{jobsweb.noop}'), "
        "('h:2:b', 'h', 2, now() - interval '10 minutes', '{jobsweb.noop}')")
    sql("INSERT INTO job_workers (id, host, pid, stopped_at, job_types) VALUES ('h:3:c', 'h', 3, now(), '{jobsweb.noop}')")
    sql("INSERT INTO job_definitions (name, job_type, schedule, next_run_at) VALUES "
        "('late', 'jobsweb.noop', '@hourly', now() - interval '1 hour'), "
        "('broken', 'jobsweb.noop', '@hourly', now() + interval '1 hour')")
    sql("UPDATE job_definitions SET failure_count = 3 WHERE name = 'broken'")

    m = scrape(metrics_app)

    assert m[("jobsweb_runs", (("status", "queued"),))] == 5
    assert m[("jobsweb_runs", (("status", "succeeded"),))] == 2
    assert m[("jobsweb_due_runs", ())] == 4
    assert 89 <= m[("jobsweb_oldest_due_seconds", ())] < 120
    assert m[("jobsweb_due_runs_unknown_type", (("job_type", "nobody.handles.this"), ("queue", "default")))] == 1
    assert m[("jobsweb_definitions_overdue", ())] == 1
    assert m[("jobsweb_definitions_failing", ())] == 1
    sleep = (("job_type", "jobsweb.sleep"),)
    assert m[("jobsweb_attempt_duration_seconds_count", sleep)] == 2
    assert m[("jobsweb_attempt_duration_seconds_bucket", sleep + (("le", "0.25"),))] == 1
    assert m[("jobsweb_attempt_duration_seconds_bucket", sleep + (("le", "30.0"),))] == 1
    assert m[("jobsweb_attempt_duration_seconds_bucket", sleep + (("le", "60.0"),))] == 2
    assert m[("jobsweb_attempt_duration_seconds_bucket", sleep + (("le", "+Inf"),))] == 2
    assert 40 <= m[("jobsweb_attempt_duration_seconds_sum", sleep)] < 41
    # An interrupted attempt says nothing about how long the job takes.
    assert m[("jobsweb_attempt_duration_seconds_count", (("job_type", "jobsweb.fail"),))] == 1
    assert 5 <= m[("jobsweb_worker_heartbeat_age_seconds", (("worker", "h:1:a"),))] < 30
    assert ("jobsweb_worker_heartbeat_age_seconds", (("worker", "h:3:c"),)) not in m
    assert m[("jobsweb_workers", (("state", "alive"),))] == 1
    assert m[("jobsweb_workers", (("state", "gone"),))] == 1


def test_every_scrape_reads_the_database_so_processes_agree(metrics_app, database_url_for_tests, sql):
    other_process = create_app({"SQLALCHEMY_DATABASE_URI": database_url_for_tests, "TESTING": True,
                                "SECRET_KEY": "0123456789abcdef-test-secret-key-0123456789-y"})
    assert scrape(metrics_app)[("jobsweb_due_runs", ())] == 0
    sql("INSERT INTO job_runs (job_type) VALUES ('jobsweb.noop')")
    assert scrape(metrics_app)[("jobsweb_due_runs", ())] == scrape(other_process)[("jobsweb_due_runs", ())] == 1


def test_open_incidents_are_counted_by_kind(metrics_app, sql):
    sql("INSERT INTO jobsweb_alert_incidents (kind, job_type, subject, summary, since) VALUES "
        "('dead', 'a', 'a', 'a died', now()), ('dead', 'b', 'b', 'b died', now())")
    sql("INSERT INTO jobsweb_alert_incidents (kind, job_type, subject, summary, since, resolved_at) VALUES "
        "('overdue', 'c', 'c', 'c is late', now(), now())")
    m = scrape(metrics_app)
    assert m[("jobsweb_incidents_open", (("kind", "dead"),))] == 2
    assert m[("jobsweb_incidents_open", (("kind", "overdue"),))] == 0
    assert m[("jobsweb_incidents_open", (("kind", "failing"),))] == 0


def test_a_short_metrics_token_stops_start_up():
    from jobsweb.core.errors import ConfigError
    from jobsweb.core.settings import from_environment

    with pytest.raises(ConfigError, match="JOBSWEB_METRICS_TOKEN must be at least 16 characters"):
        from_environment({"JOBSWEB_METRICS_TOKEN": "short"})


def test_the_duration_histogram_keeps_counting_attempts_that_were_pruned(metrics_app, sql):
    sql("INSERT INTO job_runs (job_type, status, finished_at) SELECT 'jobsweb.noop', 'succeeded', now() "
        "FROM generate_series(1, 3)")
    # Two attempts old enough to be added to the stored totals, one still recent.
    sql("INSERT INTO job_attempts (run_id, attempt, outcome, started_at, finished_at) VALUES "
        "(1, 1, 'succeeded', now() - interval '10 minutes 1 second', now() - interval '10 minutes'), "
        "(2, 1, 'failed', now() - interval '10 minutes 3 seconds', now() - interval '10 minutes'), "
        "(3, 1, 'succeeded', now() - interval '0.5 seconds', now())")
    noop = (("job_type", "jobsweb.noop"),)
    before = scrape(metrics_app)
    sql("DELETE FROM job_runs WHERE id IN (1, 2)")  # as retention would
    after = scrape(metrics_app)
    for m in (before, after):
        assert m[("jobsweb_attempt_duration_seconds_count", noop)] == 3
        assert m[("jobsweb_attempt_duration_seconds_bucket", noop + (("le", "0.5"),))] == 1
        assert m[("jobsweb_attempt_duration_seconds_bucket", noop + (("le", "1.0"),))] == 2
        assert m[("jobsweb_attempt_duration_seconds_bucket", noop + (("le", "5.0"),))] == 3
        assert 4.4 < m[("jobsweb_attempt_duration_seconds_sum", noop)] < 4.6
    assert sql("SELECT job_type, count FROM job_duration_totals") == [("jobsweb.noop", 2)]


def test_a_scrape_joins_to_their_runs_only_the_attempts_of_the_last_seconds(metrics_app, sql):
    sql("INSERT INTO job_runs (job_type, status, finished_at) SELECT 'jobsweb.noop', 'succeeded', now() "
        "FROM generate_series(1, 2)")
    sql("INSERT INTO job_attempts (run_id, attempt, outcome, started_at, finished_at) VALUES "
        "(1, 1, 'succeeded', now() - interval '61 seconds', now() - interval '1 minute'), "
        "(2, 1, 'succeeded', now() - interval '1 second', now())")
    m = scrape(metrics_app)
    assert m[("jobsweb_attempt_duration_seconds_count", (("job_type", "jobsweb.noop"),))] == 2
    # The minute-old attempt is in the stored totals: the next scrapes do not read it again.
    assert sql("SELECT job_type, count FROM job_duration_totals") == [("jobsweb.noop", 1)]


def test_metrics_report_each_queues_depth_running_runs_and_pause(metrics_app, sql):
    sql("INSERT INTO job_queues (name, paused) VALUES ('mail', true)")
    sql("INSERT INTO job_runs (job_type, queue) VALUES ('t', 'mail'), ('t', 'mail'), ('t', 'default')")
    sql("INSERT INTO job_runs (job_type, queue, status) VALUES ('t', 'default', 'running')")
    m = scrape(metrics_app)
    assert m[("jobsweb_queue_depth", (("queue", "mail"),))] == 2
    assert m[("jobsweb_queue_depth", (("queue", "default"),))] == 1
    assert m[("jobsweb_queue_running", (("queue", "default"),))] == 1
    assert m[("jobsweb_queue_running", (("queue", "mail"),))] == 0
    assert m[("jobsweb_queue_paused", (("queue", "mail"),))] == 1
    assert m[("jobsweb_queue_paused", (("queue", "default"),))] == 0
    # The paused queue's two due runs wait for a resume, not for a worker.
    assert m[("jobsweb_due_runs", ())] == 1
    assert m[("jobsweb_due_runs_paused", ())] == 2


def test_a_long_history_is_sealed_a_bounded_number_of_attempts_a_scrape_its_counts_only_growing(
        metrics_app, sql, monkeypatch):
    # At 10,000,000 attempts the first scrape sealed them all in one statement, 15-20 s, past the
    # page's 4.5 s limit on the server: it was stopped every time and /metrics answered 503 for good.
    from jobsweb.ops import durations

    monkeypatch.setattr(durations, "SEAL_AT_MOST", 2)
    sql("INSERT INTO job_runs (job_type, status, finished_at) SELECT 'jobsweb.noop', 'succeeded', now() "
        "FROM generate_series(1, 8)")
    sql("INSERT INTO job_attempts (run_id, attempt, outcome, started_at, finished_at) "
        "SELECT n, 1, 'succeeded', now() - make_interval(mins => 60 - n) - interval '1 second', "
        "       now() - make_interval(mins => 60 - n) FROM generate_series(1, 7) n")
    sql("INSERT INTO job_attempts (run_id, attempt, outcome, started_at, finished_at) "
        "VALUES (8, 1, 'succeeded', now() - interval '1 second', now())")  # recent: not sealed yet
    noop = (("job_type", "jobsweb.noop"),)
    counts = [scrape(metrics_app)[("jobsweb_attempt_duration_seconds_count", noop)] for _ in range(4)]
    # Up to the next finished_at two attempts on: 2, then 3 (from the one the first stopped at);
    # the totals alone while catching up; then the recent one too.
    assert counts == [2, 5, 8, 8]
    assert sql("SELECT count FROM job_duration_totals") == [(7,)]
