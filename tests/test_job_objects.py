"""@jobsweb.job returns the handler as a Job: still callable, with .enqueue() (issue 12, part 7)."""

import pytest

from jobsweb import InvalidInput, JobContext, job
from jobsweb.core.database import db
from jobsweb.engine.jobs import registry
from jobsweb.testing import drain

pytestmark = pytest.mark.usefixtures("registry_snapshot")


def declare():
    @job("test.send_invoice", max_attempts=3)
    def send_invoice(ctx):
        """Send one invoice."""
        return {"sent": ctx.payload["invoice"]}

    return send_invoice


def test_a_decorated_function_can_still_be_called_directly_and_keeps_its_name_and_doc():
    send_invoice = declare()
    assert send_invoice(JobContext(1, "test.send_invoice", {"invoice": 7}, 1, 3)) == {"sent": 7}
    assert send_invoice.__name__ == "send_invoice" and send_invoice.__doc__ == "Send one invoice."
    assert send_invoice.name == "test.send_invoice"
    # The worker looks the plain function up by name.
    assert registry.get("test.send_invoice").func is send_invoice.__wrapped__


def test_enqueue_creates_a_run_of_its_job_type_and_returns_its_id(app, sql):
    send_invoice = declare()
    with app.app_context():
        run_id = send_invoice.enqueue({"invoice": 7}, idempotency_key="invoice-7")
        assert send_invoice.enqueue({"invoice": 7}, idempotency_key="invoice-7") == run_id
    assert sql("SELECT job_type, payload, max_attempts, status FROM job_runs WHERE id = %s", [run_id]) == [
        ("test.send_invoice", {"invoice": 7}, 3, "queued")]


def test_a_job_types_queue_and_priority_are_its_runs_defaults_and_enqueue_may_override_them(app, sql):
    @job("test.report", queue="reports", priority=5)
    def report(ctx):
        return None

    with app.app_context():
        default = report.enqueue()
        urgent = report.enqueue(queue="urgent", priority=-10, unique_key="report:today")
        assert report.enqueue(unique_key="report:today") == urgent
    assert sql("SELECT id, queue, priority FROM job_runs ORDER BY id") == [
        (default, "reports", 5), (urgent, "urgent", -10)]
    with pytest.raises(InvalidInput, match="priority"):
        job("test.bad", priority=5000)


def test_enqueue_with_a_session_joins_that_transaction(app, sql):
    send_invoice = declare()
    with app.app_context():
        send_invoice.enqueue({"invoice": 1}, session=db.session)
        db.session.rollback()
        kept = send_invoice.enqueue({"invoice": 2}, session=db.session)
        assert sql("SELECT count(*) FROM job_runs") == [(0,)]  # not committed yet
        db.session.commit()
    assert sql("SELECT id, payload FROM job_runs") == [(kept, {"invoice": 2})]


def test_a_run_enqueued_from_a_job_object_is_executed_by_its_handler(app):
    send_invoice = declare()
    with app.app_context():
        run_id = send_invoice.enqueue({"invoice": 9})
        [ran] = drain()
    assert (ran.run_id, ran.status, ran.result) == (run_id, "succeeded", {"sent": 9})


def test_bad_input_to_enqueue_names_the_field(app, sql):
    send_invoice = declare()
    with app.app_context(), pytest.raises(InvalidInput) as caught:
        send_invoice.enqueue(["not", "a", "dict"])
    assert caught.value.field == "payload"
    assert sql("SELECT count(*) FROM job_runs") == [(0,)]
