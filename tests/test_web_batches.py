"""The admin screen's workflow parts: the batch page and its actions, a run's dependencies,
the runs list's ?batch= filter, and waiting runs shown as waiting."""

import re

from jobsweb import batch, enqueue
from tests.conftest import csrf_token
from tests.test_worker import make_worker


def run_ids(html):
    return [int(n) for n in re.findall(r'(?:<td>|<li>)<a href="/runs/(\d+)"', html)]  # each row's own link, not a reason's


def make_batch(app):
    with app.app_context():
        with batch(on_finish="test.batch_callback", payload={"export": 7}) as export:
            ok = export.enqueue("test.record")
            dead = export.enqueue("jobsweb.fail", max_attempts=1)
            waiting = export.enqueue("test.record", after=[dead])
    return export, ok, dead, waiting


def test_the_batch_page_shows_counts_progress_callbacks_and_members(app, sign_in, sql):
    export, ok, dead, waiting = make_batch(app)
    make_worker(app).run()
    client = sign_in("viewer")
    html = client.get(f"/batches/{export.id}").get_data(as_text=True)
    assert "Finished" in html and "3 of 3 members ended" in html
    assert '<rect class="s-succeeded"' in html and '<rect class="s-dead"' in html
    assert f"run #{export.callbacks['on_finish']}" in html
    assert set(run_ids(html)) >= {ok, dead, waiting}
    assert "Retry failed members" not in html  # a viewer sees no actions


def test_retrying_a_batchs_failed_members_reopens_it_and_is_audited(app, sign_in, sql):
    export, ok, dead, waiting = make_batch(app)
    make_worker(app).run()
    client = sign_in("operator")
    page = client.get(f"/batches/{export.id}")
    response = client.post(f"/batches/{export.id}/retry", data={"csrf_token": csrf_token(client, f"/batches/{export.id}")})
    assert response.status_code == 302 and page.status_code == 200
    assert sql("SELECT status FROM job_runs WHERE id = ANY(%s) ORDER BY id", [[dead, waiting]]) == \
        [("queued",), ("waiting",)]
    assert sql("SELECT finished_at IS NULL, pending FROM job_batches") == [(True, 2)]
    assert sql("SELECT action, target_type, target_id, detail->>'changed' FROM jobsweb_audit_log "
               "WHERE action LIKE 'batch%'") == [("batch_retry", "batch", export.id, "2")]


def test_cancelling_the_rest_of_a_batch_cancels_its_unended_members(app, sign_in, sql):
    export, ok, dead, waiting = make_batch(app)
    client = sign_in("operator")
    token = csrf_token(client, f"/batches/{export.id}")
    assert client.post(f"/batches/{export.id}/cancel", data={"csrf_token": token}).status_code == 302
    assert sql("SELECT count(*) FROM job_runs WHERE batch_callback IS NULL AND status = 'cancelled'") == [(3,)]
    assert sql("SELECT status FROM job_runs WHERE batch_callback = 'on_finish'") == [("queued",)]
    assert sql("SELECT action FROM jobsweb_audit_log WHERE target_type = 'batch'") == [("batch_cancel",)]


def test_batch_actions_need_an_operator_and_a_csrf_token(app, sign_in):
    export, *_ = make_batch(app)
    viewer = sign_in("viewer")
    assert viewer.post(f"/batches/{export.id}/cancel",
                       data={"csrf_token": csrf_token(viewer, f"/batches/{export.id}")}).status_code == 403
    operator = sign_in("operator")
    assert operator.post(f"/batches/{export.id}/cancel").status_code == 400


def test_an_unknown_batch_is_a_404(sign_in):
    assert sign_in("viewer").get("/batches/999").status_code == 404


def test_the_run_page_shows_what_it_waits_for_and_what_waits_for_it(app, sign_in):
    with app.app_context():
        a = enqueue("test.record")
        b = enqueue("test.record", after=[a])
        c = enqueue("test.record", after=[b])
    client = sign_in("viewer")
    html = client.get(f"/runs/{b}").get_data(as_text=True)
    waits, waited = html.split("Waits for</h2>")[1].split("Waited for by</h2>")
    assert run_ids(waits) == [a] and run_ids(waited)[:1] == [c]
    assert 'class="badge s-waiting">Waiting<' in html and "once what it waits for has succeeded" in html


def test_the_runs_list_filters_by_batch_and_shows_waiting_runs_as_waiting(app, sign_in):
    export, ok, dead, waiting = make_batch(app)
    with app.app_context():
        enqueue("test.record")
    client = sign_in("viewer")
    html = client.get(f"/runs?batch={export.id}").get_data(as_text=True)
    assert sorted(run_ids(html)) == [ok, dead, waiting]
    assert 'class="badge s-waiting">Waiting<' in html
    assert client.get("/runs?batch=abc").status_code == 400


def test_the_dashboard_never_counts_a_waiting_run_as_due(app, sign_in, sql):
    with app.app_context():
        first = enqueue("test.record")
        for _ in range(3):
            enqueue("test.record", after=[first])
    sql("UPDATE job_runs SET run_at = now() - interval '1 hour'")
    html = sign_in("viewer").get("/").get_data(as_text=True)
    assert "1 run due now" in html


def test_cancelling_the_rest_of_a_large_batch_goes_a_bulk_batch_of_members_per_transaction(app, sign_in, sql):
    app.config["JOBSWEB_BULK_BATCH"] = 7
    with app.app_context():
        with batch(on_finish="test.batch_callback", on_success="test.batch_callback") as export:
            export.enqueue_many("test.record", [{}] * 20, run_at=None, queue="held")
    client = sign_in("operator")
    response = client.post(f"/batches/{export.id}/cancel", data={"csrf_token": csrf_token(client, "/")})
    assert response.status_code == 302
    assert "Cancelled 20 members of batch" in client.get(response.location).get_data(as_text=True)
    assert sql("SELECT pending, failures, finishes FROM job_batches") == [(0, 20, 1)]
    assert sql("SELECT batch_callback, status FROM job_runs WHERE batch_callback IS NOT NULL ORDER BY 1") == [
        ("on_finish", "queued"), ("on_success", "cancelled")]
    # Three transactions, so three xmin values among the members.
    assert sql("SELECT count(DISTINCT xmin::text) FROM job_runs WHERE batch_callback IS NULL") == [(3,)]
    assert sql("SELECT detail->>'changed' FROM jobsweb_audit_log WHERE action = 'batch_cancel'") == [("20",)]
