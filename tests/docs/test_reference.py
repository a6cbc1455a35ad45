"""docs/REFERENCE.md: every block, in document order (tests/docs/snippets.py).

Its python blocks run in the scratch host app; its `flask --app wsgi ...` commands run the
standalone app on the same scratch database, with what the page gives a reader and nothing
more: the job type its schedules name comes from the page's own `reports.py`, in the
`JOBSWEB_HANDLERS` the page exports. "Testing your jobs" is a test file of
a reader's app: it is written as tests/test_invoices.py beside a small `myapp` (a factory, the
send_invoice job and the close_order that enqueues it) and run with pytest there.
"""

import re

import psycopg
import pytest
from sqlalchemy.engine import make_url

from jobsweb.core.database import database_url, libpq_url
from tests.docs.snippets import ROOT, Document, fence_test

# Nineteen flask commands and a pytest run, about 2 s each under make test's load (45 s at load
# 4.8): with the tests marked slow, which make test runs beside the rest.
pytestmark = pytest.mark.slow

DOC = Document("docs/REFERENCE.md")
test_fences = fence_test(DOC)

MYAPP = {
    "myapp/__init__.py": '''
import os

from flask import Flask
from flask_sqlalchemy import SQLAlchemy

from jobsweb import JobsWeb

db = SQLAlchemy()
jobsweb = JobsWeb()


def create_app(test_config=None):
    app = Flask(__name__)
    app.config.update(SQLALCHEMY_DATABASE_URI=os.environ["DATABASE_URL"].replace("postgresql://", "postgresql+psycopg://", 1),
                      SECRET_KEY="myapp-test-secret-key-0123456789abcdef")
    app.config.update(test_config or {})
    db.init_app(app)
    jobsweb.init_app(app, url_prefix="/admin/jobs")
    from . import jobs  # noqa: F401 - registers send_invoice
    return app
''',
    "myapp/jobs.py": '''
from jobsweb import job


@job("send_invoice")
def send_invoice(ctx):
    return {"sent": ctx.payload["invoice_id"]}
''',
    "myapp/orders.py": '''
from .jobs import send_invoice


def close_order(order_id):
    send_invoice.enqueue({"invoice_id": order_id})
''',
}


# "Testing your jobs" runs the reader's tests on the reader's test database: a new, empty one.
TEST_DATABASE = "jobsweb_docs_myapp_test"


@pytest.fixture(scope="module")
def reference(docs, postgres_server):
    """The Runner, with the readers' job types and app in its scratch directory."""
    admin, _ = postgres_server
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {TEST_DATABASE} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {TEST_DATABASE}")
    docs.substitute["postgresql://localhost/myapp_test"] = libpq_url(
        database_url(make_url(admin).set(database=TEST_DATABASE).render_as_string(hide_password=False)))
    from tests.docs.scratch_host import db

    docs.namespace["db"] = db  # the reader's Flask-SQLAlchemy: the scratch host app's
    for name, text in MYAPP.items():
        (docs.directory / name).parent.mkdir(parents=True, exist_ok=True)
        (docs.directory / name).write_text(text)
    (docs.directory / "tests").mkdir(exist_ok=True)
    yield docs
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {TEST_DATABASE} WITH (FORCE)")


@pytest.mark.parametrize("block", DOC.blocks, ids=DOC.ids)
def test_block(block, reference):
    if block.id == "pytest":
        # "Testing your jobs" is a reader's own app (myapp), tested in its own directory: not in
        # the shell where the Schedules section exported the standalone app's JOBSWEB_HANDLERS.
        reference.exported.clear()
    reference.run(block)
    if block.id == "queues":  # each run in the queue and at the priority its comment says
        with psycopg.connect(reference.url) as conn:
            assert conn.execute(
                "SELECT payload, queue, priority FROM job_runs WHERE job_type IN ('send_invoice', 'build_report') "
                "AND NOT payload @> '{\"invoice_id\": 812}' ORDER BY id").fetchall() == [
                ({"invoice_id": 813}, "mail", -10), ({"month": "2026-11"}, "reports", 50),
                ({"invoice_id": 814}, "mail-bulk", -10), ({"invoice_id": 815}, "mail-bulk", -10),
                ({"month": "2026-12"}, "default", 0)]
            assert conn.execute("SELECT job_type, schedule, queue, priority FROM job_definitions "
                                "WHERE name = 'nightly'").fetchall() == [("build_report", "0 3 * * *", "reports", 50)]


# Paths in backticks that are not the admin screen's own: its mount point, the host's sign-in
# page (JOBSWEB_LOGIN_URL's example), a ping URL's suffix.
NOT_ROUTES = {"/", "/login", "/start"}


def test_every_path_the_reference_names_is_a_route_of_the_admin_screen(reference):
    """`/job-metrics`, `/runs/ID/delete`, `/users`, ...: each path matches a route (ID and <token>
    stand for a value) under the scratch host app's prefix, or is the prefixed URL itself."""
    from werkzeug.exceptions import MethodNotAllowed, NotFound

    text = (ROOT / "docs/REFERENCE.md").read_text()
    paths = sorted(set(re.findall(r"`(/[\w\-/<>]*)`", text)) - NOT_ROUTES)
    assert "/job-metrics" in paths and "/runs/ID/delete" in paths
    adapter = reference.app.url_map.bind("localhost")
    missing = []
    for path in paths:
        concrete = re.sub(r"/(ID|<\w+>)(?=/|$)", "/1", path)
        if not concrete.startswith("/admin/jobs/"):
            concrete = "/admin/jobs" + concrete
        try:
            adapter.match(concrete)
        except MethodNotAllowed:
            pass  # a route that only takes POST, say
        except NotFound:
            missing.append(path)
    assert missing == []


def test_every_pip_install_of_jobsweb_the_pages_give_says_where_it_comes_from():
    """jobsweb is not on the package index: `pip install 'jobsweb[sentry]'` found nothing there.
    Each one names a clone (`@ git+...`) or a wheel, bar the README's sentence saying so."""
    said = []
    for page in ("README.md", "docs/REFERENCE.md", "docs/DEPLOY.md"):
        text = " ".join((ROOT / page).read_text().split())
        said += [(page, line) for line in re.findall(r"pip install ([^`]*jobsweb[^`]*)`(?! finds nothing)", text)]
    assert said and [(page, line) for page, line in said if "@ git+" not in line and ".whl" not in line] == []
