"""The example host's own tests on SQLite, as many Flask apps keep them: jobsweb in inline mode
(JOBSWEB_INLINE), where enqueue() checks its input and runs the handler at once. Run them from
the repository's top level (tests/docs/test_examples.py does):

    pytest examples/test_host_on_sqlite.py
"""

import pytest

from examples.host_app import Customer, create_app, db
from jobsweb import InvalidInput, enqueue, get_run


@pytest.fixture
def app(tmp_path):
    app = create_app({"SQLALCHEMY_DATABASE_URI": f"sqlite:///{tmp_path / 'test.db'}", "TESTING": True,
                      "SECRET_KEY": "test", "JOBSWEB_INLINE": True})
    with app.app_context():
        db.create_all()
        db.session.add(Customer(email="ann@example.com", invoices_sent=0))
        db.session.commit()
    return app


def test_the_invoice_api_sends_the_invoice_before_it_answers(app):
    response = app.test_client().post("/api/customers/1/invoice")
    assert response.status_code == 202
    with app.app_context():
        run = get_run(response.get_json()["run_id"])
        assert (run.status, run.attempts, run.result, run.done) == ("succeeded", 1, {"sent_to": "ann@example.com"}, True)
        assert db.session.get(Customer, 1).invoices_sent == 1


def test_a_failing_handler_leaves_a_dead_run_with_its_error(app):
    with app.app_context():
        run = get_run(enqueue("send_invoice", {"customer_id": 99}))  # no such customer
    assert (run.status, run.error_type) == ("dead", "AttributeError")


def test_a_payload_is_checked_as_on_postgresql(app):
    with app.app_context(), pytest.raises(InvalidInput, match="payload"):
        enqueue("send_invoice", {"amount": float("nan")})
