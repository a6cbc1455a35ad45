"""README.md's blocks, run in order as a newcomer follows the page (tests/docs/snippets.py): the
install lines, the first job and its
worker's output, the host app of steps 2 to 9 (`app.py`, which steps 2, 6 and 7 write) signed in
and not, its test, its deploy line, the Procfile, and each troubleshooting message produced."""

import importlib
import os
import re
import socket
import subprocess
import sys
import tomllib

from pathlib import Path

import psycopg
import pytest
from flask import Flask, render_template_string
from flask.sessions import SecureCookieSessionInterface
from flask_login import login_user
from sqlalchemy.engine import make_url

from jobsweb.core.database import libpq_url
from tests.docs.snippets import ROOT, Document, fence_test, output_matches

DOC = Document("README.md")
DOCS_MIGRATED = False  # the first job's `flask jobs migrate` makes jobsweb's tables, as on a new database
test_fences = fence_test(DOC)

# The page runs as a reader follows it: a virtualenv and jobsweb's dependencies installed twice
# (from a clone and from a wheel), about 20 `flask` and server processes: with the other slow tests,
# in make test's run beside the rest.
pytestmark = pytest.mark.slow
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
# The job types of your own app that the workflows block enqueues (the text before it says they are yours).
WORKFLOW_TYPES = ("extract", "transform", "report", "notify", "render_page", "fetch", "parse", "store")


UV = Path(sys.executable).parent / "uv"  # in make test's venv (Makefile)
# The page's placeholder for the reader's database, in its `export DATABASE_URL=...` line.
READERS_DATABASE = "postgresql://user:password@localhost:5432/app"


@pytest.fixture(scope="module", autouse=True)
def database_url_in_the_environment(docs):
    """app.py reads DATABASE_URL, in this process too (imported by the test block and the checks).
    The commands get what the page tells a reader to export, and no SECRET_KEY or FLASK_APP of
    the harness: a reader's shell has neither until the page says so."""
    for name in ("SECRET_KEY", "FLASK_APP"):
        del docs.env[name]
    docs.substitute[READERS_DATABASE] = docs.url
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DATABASE_URL", docs.url)
        yield


@pytest.mark.parametrize("block", DOC.blocks, ids=DOC.ids)
def test_block(block, docs, postgres_server):
    """The block, with what this module does before and after it (before_<id>, after_<id>)."""
    name = block.id.replace("-", "_")
    env = docs.env
    try:
        if f"before_{name}" in globals():
            globals()[f"before_{name}"](docs)
        docs.run(block)
        if f"after_{name}" in globals():
            globals()[f"after_{name}"](docs, block, postgres_server)
    finally:
        docs.env = env
        docs.sign_in = None


# -- install -----------------------------------------------------------------------------------

def before_install(docs):
    """/path/to/jobsweb is a clone of this repository (its committed state), as a reader's is."""
    clone = docs.directory / "src" / "jobsweb"  # not ./jobsweb, which `import jobsweb` would find
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True, timeout=120)
    docs.substitute.update({"/path/to/jobsweb": str(clone), "/tmp/wheels": str(docs.directory / "wheels")})


def installed(docs, code):
    done = subprocess.run([str(docs.directory / ".venv" / "bin" / "python"), "-c", code], cwd=docs.directory,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def after_install(docs, block, _):
    shown = installed(docs, "import importlib.metadata as m, gunicorn, jobsweb\n"
                            "print(m.version('jobsweb'), m.distribution('jobsweb').read_text('direct_url.json'))")
    assert shown.startswith(f"{VERSION} ") and '"vcs": "git"' in shown, shown
    # What the README says of PyPI: the name finds nothing there.
    refused = subprocess.run([str(docs.directory / ".venv" / "bin" / "pip"), "install", "--dry-run", "jobsweb==99"],
                             capture_output=True, text=True, timeout=120)
    assert refused.returncode != 0 and "No matching distribution found for jobsweb" in refused.stderr, refused.stderr
    # From here on, the reader's shell is the one the block activated the virtualenv in: every
    # later command (the wheel's install, hello.py's flask, app.py's, gunicorn) is that venv's,
    # never the suite's own, whose jobsweb is the checkout. In place: test_block keeps this dict.
    venv = docs.directory / ".venv"
    docs.env.update(VIRTUAL_ENV=str(venv), PATH=f"{venv / 'bin'}{os.pathsep}{docs.env['PATH']}")


def before_wheel(docs):
    """Into the virtualenv the install block made and activated (never the suite's own)."""
    assert (docs.directory / ".venv" / "bin" / "pip").exists(), "the install block makes the virtualenv the wheel goes into"


def after_wheel(docs, block, _):
    assert [path.name for path in (docs.directory / "wheels").iterdir()] == [f"jobsweb-{VERSION}-py3-none-any.whl"]
    assert list((docs.directory / "src" / "jobsweb").glob("*.whl")) == []  # nothing dropped into the clone
    shown = installed(docs, "import importlib.metadata as m, jobsweb\nprint(m.version('jobsweb'), jobsweb.__file__)")
    assert shown.startswith(f"{VERSION} {docs.directory / '.venv' / 'lib'}"), shown


# -- the first job -------------------------------------------------------------------------------

def after_environment(docs, block, _):
    assert docs.exported["DATABASE_URL"] == docs.url and len(docs.exported["SECRET_KEY"]) == 64


def after_hello(docs, block, _):
    assert "Hello, world!" in docs.outputs["hello"]


def after_serve_hello(docs, block, _):
    """Signed in as the user the page made, on hello.py's dashboard: no worker is running, and its
    hint names hello, not the standalone app's wsgi."""
    [hint] = re.findall(r"Start one with (.+)\.", docs.pages["serve-hello"])
    assert hint == "flask --app hello run-jobs --forever"


# -- the host app of steps 2 to 9 ------------------------------------------------------------------

def host_app(docs, **config):
    """app.py as the steps so far wrote it, imported afresh, its app built."""
    sys.modules.pop("app", None)
    module = importlib.import_module("app")
    return module, module.create_app({"TESTING": True, "SECRET_KEY": "readme-host-secret", **config})


def before_migrate(docs):
    """The host's own dependencies in the reader's virtualenv, beside jobsweb (its sign-in and its
    driver: a host app has them before it adds jobsweb); and its own migration history:
    `flask db init` and `flask db migrate` of step 2's User."""
    subprocess.run([UV, "pip", "install", "--quiet", "--python", docs.directory / ".venv" / "bin" / "python",
                    "Flask-Login>=0.6.3,<0.7", "psycopg2-binary>=2.9.9"], check=True, timeout=300)
    _, app = host_app(docs)
    runner = app.test_cli_runner()
    directory = str(docs.directory / "migrations")
    for args in (["db", "init", "-d", directory], ["db", "migrate", "-d", directory, "-m", "users"]):
        result = runner.invoke(args=args)
        assert result.exit_code == 0, result.output


def after_migrate(docs, block, _):
    with psycopg.connect(docs.url) as conn:
        assert conn.execute("SELECT count(*) FROM \"user\"").fetchone() == (0,)
    assert "jobsweb's schema is up to date (" in docs.outputs["migrate"]


def before_progress_template(docs):
    """The app of steps 2, 6 and 7; a signed-in user starts an export (step 6)."""
    module, app = host_app(docs)
    docs.app, docs.host = app, module
    with app.app_context():
        module.db.session.add_all([module.User(id=101, email="ann@example.com"),
                                   module.User(id=102, email="bob@example.com"),
                                   module.User(id=103, email="billing@example.com")])
        module.db.session.commit()
    ann = signed_in(app, 101)
    response = ann.post("/orders/7/export")
    assert response.status_code == 202, response.get_data(as_text=True)
    docs.export_run_id = response.get_json()["run_id"]


def signed_in(app, user_id):
    client = app.test_client()
    with client.session_transaction() as session:
        session["_user_id"] = str(user_id)  # Flask-Login's own key: signed in as the host signs people in
        session["_fresh"] = True
    return client


def after_progress_template(docs, block, _):
    # The runner rendered it as nobody signed in (an AttributeError on export_run_id before).
    assert docs.outputs[block.id].strip() == ""
    app, module = docs.app, docs.host
    with app.test_request_context():
        login_user(module.db.session.get(module.User, 101))
        assert render_template_string(block.text).strip() == "Exporting… 0%"
    with app.test_request_context():
        login_user(module.db.session.get(module.User, 102))  # no export of his own
        assert render_template_string(block.text).strip() == ""
    # The status endpoint reads only the signed-in user's own run.
    assert signed_in(app, 101).get("/export/status").get_json() == {"status": "queued", "progress": None}
    assert signed_in(app, 102).get("/export/status").status_code == 404
    assert app.test_client().get("/export/status").status_code == 401
    with app.app_context():
        assert module.db.session.get(module.User, 101).export_run_id == docs.export_run_id
    # Step 2's authorize and step 5's table: STAFF_ROLES' operator is let in, another user refused,
    # nobody signed in sent to the host's sign-in page.
    assert signed_in(app, 103).get("/admin/jobs/runs").status_code == 200
    assert signed_in(app, 101).get("/admin/jobs/runs").status_code == 403
    response = app.test_client().get("/admin/jobs/runs")
    assert (response.status_code, response.headers["Location"]) == (302, "/login?next=%2Fadmin%2Fjobs%2Fruns")


def after_test(docs, block, _):
    """Step 8's test, run as pytest would: `app` is the host's test app, jobsweb_tables' work done."""
    from jobsweb.testing import create_schema, empty_tables

    app, module = docs.app, docs.host
    with app.app_context():
        create_schema()
        empty_tables()
        module.db.session.execute(module.User.__table__.delete())
        module.db.session.commit()
    docs.namespace["test_a_new_user_is_welcomed"](app, None)


def before_entrypoint(docs):
    """Signed in as app.py signs people in: the page leaves its sign-in page to the reader's own
    app, so the check holds Flask-Login's session for STAFF_ROLES' operator, signed with the
    SECRET_KEY the reader exported."""
    module, app = host_app(docs)
    with app.app_context():
        staff = module.User(id=104, email="billing@example.com")  # ids given, as the steps gave theirs
        module.db.session.add(staff)
        module.db.session.commit()
        staff_id = staff.id
    signer = Flask("reader")
    signer.secret_key = docs.exported["SECRET_KEY"]
    cookie = SecureCookieSessionInterface().get_signing_serializer(signer).dumps(
        {"_user_id": str(staff_id), "_fresh": True})

    def sign_in(block, page, prefix):
        page.context.add_cookies([{"name": "session", "value": cookie, "url": f"http://127.0.0.1:{docs.port}"}])

    docs.sign_in = sign_in


def after_entrypoint(docs, block, _):
    assert "Listening at: http://127.0.0.1:" in docs.outputs["entrypoint"]
    # Signed in as the operator the page lets in, on a dashboard whose hint names app.py.
    assert re.findall(r"Start one with (.+)\.", docs.pages["entrypoint"]) == ["flask --app app run-jobs --forever"]


def test_jobswebs_gunicorn_settings_listen_on_every_interface_as_the_readme_says(monkeypatch):
    import jobsweb.gunicorn_conf as settings

    monkeypatch.delenv("PORT", raising=False)
    assert importlib.reload(settings).bind == ["0.0.0.0:8000"]
    monkeypatch.setenv("PORT", "5123")
    assert importlib.reload(settings).bind == ["0.0.0.0:5123"]
    text = " ".join(DOC.path.read_text().split())
    assert "listen on every interface, `0.0.0.0:$PORT` (8000 without `PORT`)" in text
    assert "listen on `0.0.0.0:$PORT`" in text


def after_enqueue(docs, block, _):
    with psycopg.connect(docs.url) as conn:
        assert conn.execute("SELECT count(*), count(*) FILTER (WHERE run_at > now() + interval '23 hours') "
                            "FROM job_runs WHERE job_type = 'send_reminder'").fetchone() == (5002, 1)


def before_workflows(docs):
    from jobsweb import job

    for name in WORKFLOW_TYPES:
        job(name)(lambda ctx: None)


def after_workflows(docs, block, _):
    from jobsweb import get_run

    with docs.app.app_context():
        assert get_run(docs.namespace["b"]).status == "waiting"
        assert get_run(docs.namespace["a"]).status == "queued"


# -- troubleshooting: each message as the product prints it ------------------------------------

def flask_hello(docs, *args, **env):
    done = subprocess.run(["flask", "--app", "hello", *args], cwd=docs.directory,
                          env={**docs.env, **docs.exported, **env},
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
    return done.returncode, done.stdout + done.stderr


def quoted(block, output, **replace):
    """The README's text block reads as lines of the real output."""
    expected = block.text
    for old, new in replace.items():
        expected = expected.replace(old, new)
    assert output_matches("...\n" + expected + "...\n", output + "\n"), (
        f"{block} does not quote the real message:\n{block.text}--- the real output:\n{output}")


def after_port_in_use(docs, block, _):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        code, output = flask_hello(docs, "run", "--port", str(port))
    assert code == 1
    quoted(block, output, **{"5000": str(port)})


def after_unregistered(docs, block, _):
    code, output = flask_hello(docs, "jobs", "enqueue", "helo")
    assert code != 0
    quoted(block, output)


@pytest.fixture(scope="module")
def new_database(postgres_server):
    """A database with nothing in it: no jobsweb tables (libpq URL)."""
    admin, _ = postgres_server
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS jobsweb_docs_readme_new WITH (FORCE)")
        conn.execute("CREATE DATABASE jobsweb_docs_readme_new")
    yield libpq_url(make_url(admin).set(database="jobsweb_docs_readme_new"))
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS jobsweb_docs_readme_new WITH (FORCE)")


def test_without_jobswebs_tables_commands_and_code_say_what_the_readme_quotes(docs, new_database):
    from jobsweb import enqueue
    from tests.docs.scratch_host import create_app

    [command] = [block for block in DOC.blocks if block.id == "no-tables-command"]
    code, output = flask_hello(docs, "run-jobs", DATABASE_URL=new_database)
    assert code == 1
    quoted(command, output)
    [raised] = [block for block in DOC.blocks if block.id == "no-tables-code"]
    app = create_app({"SQLALCHEMY_DATABASE_URI": "postgresql+psycopg" + new_database[len("postgresql"):]})
    with app.app_context(), pytest.raises(Exception) as failed:
        enqueue("jobsweb.noop")
    quoted(raised, str(failed.value).splitlines()[0])
    with app.app_context():
        from flask import current_app

        current_app.extensions["sqlalchemy"].engine.dispose()


def after_not_postgresql(docs, block, _):
    code, output = flask_hello(docs, "run-jobs", DATABASE_URL="sqlite:///app.db")
    assert code == 1
    quoted(block, output)


# -- what the prose says ---------------------------------------------------------------------------

def test_what_make_test_installs_is_what_the_readme_says():
    makefile = (ROOT / "Makefile").read_text()
    installed_packages = set(re.findall(r"apt-get install -y -qq (\S+)", makefile))
    text = " ".join(DOC.path.read_text().split())
    said = re.search(r"`make test` needs more: it installs Debian's (.+?) with `sudo apt-get`", text)
    assert said, "the README says what make test installs"
    assert set(re.findall(r"`([^`]+)`", said.group(1))) == installed_packages
    assert "axe-core@" in makefile and "axe-core from npm" in text


def test_the_version_and_licence_lines_name_what_the_repository_has():
    text = DOC.path.read_text()
    assert text.count(f"Version {VERSION}, not yet on PyPI") == 1
    for target in re.findall(r"\]\(([^)#]+)[^)]*\)", text):  # every relative link of the page resolves
        if "://" not in target:
            assert (ROOT / target).exists(), target


def test_the_postgresql_versions_said_are_the_ones_make_test_runs(docs):
    text = " ".join(DOC.path.read_text().split())
    assert "PostgreSQL 12 or newer (`make test` runs on PostgreSQL 18 and on Debian's 15;" in text
    assert "POSTGRES_STOCK := /usr/lib/postgresql/15/bin/postgres" in (ROOT / "Makefile").read_text()
    if os.environ.get("TEST_SERVER", "embedded") == "embedded" and not os.environ.get("TEST_DATABASE_URL"):
        with psycopg.connect(docs.url) as conn:
            assert conn.execute("SHOW server_version").fetchone()[0].startswith("18.")


def test_the_standalone_app_knows_the_jobs_of_jobsweb_handlers_only(docs):
    """The deploy section: the standalone app needs JOBSWEB_HANDLERS for jobs of your own."""
    from jobsweb.testing import create_schema

    with docs.app.app_context():
        create_schema()  # (made by the first job's block when the whole page runs)
    text = " ".join(DOC.path.read_text().split())
    assert "without it the standalone app knows only jobsweb's built-in jobs" in text
    (docs.standalone / "my_jobs.py").write_text(
        "from jobsweb import job\n\n\n@job('mine')\ndef mine(ctx):\n    pass\n")

    def enqueue(**env):
        done = subprocess.run(["flask", "jobs", "enqueue", "mine"], cwd=docs.standalone,
                              env={**docs.env, "FLASK_APP": "wsgi", **env}, capture_output=True, text=True, timeout=120)
        return done.returncode, done.stdout + done.stderr

    code, output = enqueue()
    assert code == 2 and "'mine' is not a registered job type" in output, output
    code, output = enqueue(JOBSWEB_HANDLERS="my_jobs")
    assert code == 0 and output.strip().isdigit(), output
