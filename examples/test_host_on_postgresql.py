"""The example host's own tests on a PostgreSQL test database (DATABASE_URL): jobsweb's tables
made and emptied by the `jobsweb_tables` fixture, runs enqueued in the request's transaction,
then run with drain(). Run them from the repository's top level (tests/docs/test_examples.py
does, twice: the second run finds jobsweb's tables made and empties them):

    DATABASE_URL=postgresql://... pytest examples/test_host_on_postgresql.py
"""

import os

import pytest

from examples.host_app import Customer, create_app, db
from jobsweb import get_run
from jobsweb.testing import drain, enqueued

pytest_plugins = ["jobsweb.pytest_plugin"]


@pytest.fixture
def app():
    app = create_app({"SQLALCHEMY_DATABASE_URI": os.environ["DATABASE_URL"], "TESTING": True, "SECRET_KEY": "test"})
    with app.app_context():
        db.drop_all()  # the app's own tables; jobsweb's are the fixture's
        db.create_all()
        db.session.add(Customer(email="ann@example.com", invoices_sent=0))
        db.session.commit()
    return app


def test_the_invoice_api_enqueues_and_drain_sends_it(app, jobsweb_tables):
    response = app.test_client().post("/api/customers/1/invoice")
    run_id = response.get_json()["run_id"]
    with app.app_context():
        assert enqueued("send_invoice") == [{"customer_id": 1}]
        assert get_run(run_id).status == "queued"
        assert [ran.status for ran in drain()] == ["succeeded"]
        assert get_run(run_id).result == {"sent_to": "ann@example.com"}


def test_each_test_starts_with_no_runs(app, jobsweb_tables):
    with app.app_context():
        assert enqueued() == []
