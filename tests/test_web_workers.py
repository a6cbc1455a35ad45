def test_the_workers_page_tells_alive_from_gone_after_two_lease_periods(sign_in, sql):
    client = sign_in("viewer")
    # The default lease is 60 s: gone after 120 s without a heartbeat.
    sql("INSERT INTO job_workers (id, host, pid, last_seen_at) VALUES "
        "('a:1:alive', 'a', 1, now() - interval '100 seconds'), ('b:2:gone', 'b', 2, now() - interval '130 seconds')")
    sql("INSERT INTO job_workers (id, host, pid, stopped_at) VALUES ('c:3:done', 'c', 3, now())")
    html = client.get("/workers").get_data(as_text=True)
    rows = {line.split("<code>")[1].split("</code>")[0]: line for line in html.split("<tr>") if "<code>" in line}
    assert ">alive<" in rows["a:1:alive"] and ">gone<" in rows["b:2:gone"] and ">stopped<" in rows["c:3:done"]
    assert 'href="/runs?worker=b:2:gone"' in rows["b:2:gone"]


def test_the_runs_list_filtered_by_worker_shows_the_runs_it_executed_or_holds(sign_in, sql):
    client = sign_in("viewer")
    sql("INSERT INTO job_runs (job_type, status) VALUES ('t.executed', 'succeeded'), ('t.other', 'succeeded'), "
        "('t.retried_elsewhere', 'succeeded')")
    sql("INSERT INTO job_runs (job_type, status, locked_by) VALUES ('t.running', 'running', 'h:1:me')")
    sql("INSERT INTO job_attempts (run_id, attempt, worker, outcome) VALUES (1, 1, 'h:1:me', 'succeeded'), "
        "(2, 1, 'h:2:you', 'succeeded'), (3, 1, 'h:1:me', 'failed'), (3, 2, 'h:2:you', 'succeeded')")
    html = client.get("/runs", query_string={"worker": "h:1:me"}).get_data(as_text=True)
    assert "t.executed" in html and "t.running" in html and "t.retried_elsewhere" in html
    assert "t.other" not in html.split('id="runs-table"')[1]
    assert 'name="worker" value="h:1:me"' in html


def test_the_dashboard_points_at_due_runs_of_a_job_type_no_worker_handles(sign_in, sql):
    client = sign_in("viewer")
    sql("INSERT INTO job_workers (id, host, pid, job_types) VALUES ('h:1:a', 'h', 1, '{jobsweb.noop}')")
    sql("INSERT INTO job_runs (job_type) VALUES ('sned_invoice'), ('sned_invoice'), ('jobsweb.noop')")
    sql("INSERT INTO job_runs (job_type, run_at) VALUES ('later.maybe', now() + interval '1 hour')")
    html = client.get("/").get_data(as_text=True)
    assert "2 due runs</a> of job type <code>sned_invoice</code>" in html
    assert "later.maybe" not in html and "<code>jobsweb.noop</code> wait" not in html


def test_the_workers_page_lists_the_job_types_each_worker_handles(sign_in, sql):
    client = sign_in("viewer")
    sql("INSERT INTO job_workers (id, host, pid, job_types) VALUES ('a:1:new', 'a', 1, '{reports.weekly,<b>odd</b>}')")
    sql("INSERT INTO job_workers (id, host, pid) VALUES ('b:2:old', 'b', 2)")
    html = client.get("/workers").get_data(as_text=True)
    rows = {line.split("<code>")[1].split("</code>")[0]: line for line in html.split("<tr>") if "<code>" in line}
    assert "<code>reports.weekly</code>" in rows["a:1:new"] and "&lt;b&gt;odd&lt;/b&gt;" in rows["a:1:new"]
    assert "not recorded" in rows["b:2:old"]


def test_the_workers_page_counts_the_runs_a_worker_did_before_its_next_heartbeat(sign_in, sql, spawn_worker):
    from tests.conftest import wait_for

    client = sign_in("viewer")
    sql("INSERT INTO job_runs (job_type) SELECT 'jobsweb.noop' FROM generate_series(1, 5)")
    # A 600 s lease: the next heartbeat (a third of it) is minutes away.
    spawn_worker("--forever", JOBSWEB_LEASE_SECONDS=600)
    wait_for(lambda: sql("SELECT count(*) FROM job_runs WHERE status = 'succeeded'") == [(5,)], message="5 runs done")
    [(worker, done)] = sql("SELECT id, runs_done FROM job_workers")
    assert done == 5
    row = client.get("/workers").get_data(as_text=True).split(worker)[2].split("</tr>")[0]
    assert '<td data-label="runs done">5</td>' in row
