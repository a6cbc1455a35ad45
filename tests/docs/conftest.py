"""The `docs` fixture: one Runner per document's test module, which runs or checks each fenced
block (tests/docs/snippets.py says how a module uses it), in a scratch directory with a scratch
host app (scratch_host.py) on a scratch database of the suite's server, jobsweb's tables made.
At the end of a run that ran docs blocks, the terminal summary counts them."""

import contextlib
import importlib
import io
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import types
import urllib.error
import urllib.request
from pathlib import Path

import psycopg
import pytest
from sqlalchemy.engine import make_url

from jobsweb.core.database import database_url, libpq_url
from tests.docs import snippets
from tests.docs.snippets import ROOT, Block

SECRET_KEY = "docs-scratch-host-secret-key-0123456789"  # 32+ characters, as the standalone app wants
COMMAND_TIMEOUT = 360  # seconds for one command of an sh block (a pip install took over 180 at load 20)
SERVE_TIMEOUT = 60  # seconds for a serving command to answer, at a load of 15
STOP_TIMEOUT = 30  # seconds a serving command has to exit after SIGTERM (a PaaS's kill timeout)
# Commands that serve until stopped: started, checked (`serve=` in the block's info string), stopped.
SERVING = re.compile(r"\bgunicorn\b|--forever|\bmake run\b|\bflask\b.*\s(run|dev)(\s|$)|\bhoncho start\b")

COLLECTED = {}  # str(block) -> block: every docs block collected, selected or not (-m, -k), for the summary
RAN = set()  # str(block) of those run in this pytest process


def _block(item):
    block = getattr(item, "callspec", None) and item.callspec.params.get("block")
    return block if isinstance(block, Block) else None


def pytest_itemcollected(item):
    if _block(item):
        COLLECTED[str(_block(item))] = _block(item)


def pytest_runtest_setup(item):
    if _block(item):
        RAN.add(str(_block(item)))


def pytest_terminal_summary(terminalreporter):
    """docs: 85 blocks in 12 documents: ... (make test runs the README's with the slow tests: each
    of its pytest runs that ran docs blocks prints the whole count and how many ran in it)."""
    if not RAN:
        return
    blocks = list(COLLECTED.values())
    count = {category: sum(block.category == category for block in blocks)
             for category in ("run", "checked", "diagram", "norun")}
    documents = {block.document for block in blocks}
    here = "" if len(RAN) == len(blocks) else f" ({len(RAN)} of them in this pytest run)"
    terminalreporter.write_line(
        f"docs: {len(blocks)} blocks in {len(documents)} documents: {count['run']} run, {count['checked']} checked "
        f"(text/json/...), {count['diagram']} diagrams, {count['norun']} marked not runnable{here}")
    for document in sorted(documents):
        kinds = {}
        for block in blocks:
            if block.document == document:
                kind = f"{block.kind} norun" if block.norun else block.kind
                kinds[kind] = kinds.get(kind, 0) + 1
        terminalreporter.write_line(f"  {document}: " + ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items())))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Runner:
    """Runs a document's blocks in order: python in one namespace (a module of its own) inside
    `app`'s context, sh in `directory`, jinja with `app`, sql on the scratch database; checks the
    others. What each block printed or returned is in `outputs[block.id]`."""

    def __init__(self, name, url, directory):
        self.url = url  # the scratch database, as a libpq URL (DATABASE_URL of the commands)
        self.directory = directory
        self.module = types.ModuleType(f"docs_{name}")
        self.module.__file__ = str(directory / f"docs_{name}.py")  # Flask(__name__)'s root: the scratch directory
        sys.modules[self.module.__name__] = self.module
        self.namespace = self.module.__dict__
        self.outputs = {}
        self.pages = {}  # block id -> the text of the dashboard a `serve=dashboard:` check opened
        self.parsed = {}
        self.jinja_context = {}
        self.written = set()  # the files blocks wrote (file=NAME): a later block of the same name adds to it
        # Text of the document's commands replaced before they run, e.g. {"/path/to/jobsweb": a clone}.
        self.substitute = {}
        sys.path.insert(0, str(directory))  # python blocks import what blocks wrote, as from a reader's directory
        self.standalone = directory / "standalone"  # wsgi.py and gunicorn.conf.py, for app=standalone
        self.env = self._environment()
        # Variables a block exported (`export NAME=...`): set for the document's later blocks too,
        # as a reader's shell keeps them.
        self.exported = {}
        # email -> password of each `users create EMAIL ... --password P` a block ran: whom a
        # `serve=dashboard:` check signs in as (the last one).
        self.users = {}
        # How a `serve=dashboard:` check signs in: jobsweb's own sign-in page as the user the
        # document created, unless a test module sets its own (a host app's sign-in).
        self.sign_in = None
        self.browser = None  # the session's Chromium, when a check asks for it (the docs fixture)
        self.port = int(self.env["PORT"])
        scratch_host = importlib.import_module("tests.docs.scratch_host")
        # The app python blocks run in and jinja renders with; a module may set its own.
        self.app = scratch_host.create_app({"SQLALCHEMY_DATABASE_URI": database_url(url), "SECRET_KEY": SECRET_KEY})

    def _environment(self):
        """A reader's shell: no JOBSWEB_* or PYTHON* of the suite, the venv's bin first."""
        env = {key: value for key, value in os.environ.items() if not key.startswith(("JOBSWEB_", "PYTHON"))}
        port = free_port()
        env.update(PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
                   PYTHONUNBUFFERED="1",  # printed lines and log lines in the order a terminal shows them
                   FLASK_APP="docs_host", DATABASE_URL=self.url, SECRET_KEY=SECRET_KEY, PORT=str(port),
                   # The commands' servers listen on loopback only, whatever their own settings
                   # say (gunicorn: GUNICORN_CMD_ARGS overrides its config file).
                   GUNICORN_CMD_ARGS=f"--bind=127.0.0.1:{port}", FLASK_RUN_HOST="127.0.0.1",
                   FLASK_RUN_PORT=str(port))
        return env

    def run(self, block):
        """Run or check one block (a norun block: only that its visible note is there)."""
        if not block.kind or block.kind not in snippets.KINDS:
            pytest.fail(f"{block}: {'no kind' if not block.kind else f'unknown kind {block.kind!r}'} in its info string")
        if block.norun:
            assert block.note, f"{block}: norun without a visible '*Not run by make test: why*' just before it"
            return None
        if "file" in block.options:
            name = block.options["file"]
            # app=standalone: beside wsgi.py, where the standalone app's commands import it from.
            folder = self.standalone if block.options.get("app") == "standalone" else self.directory
            with open(folder / name, "a" if name in self.written else "w") as file:
                file.write(("\n\n" if name in self.written else "") + block.text)
            self.written.add(name)
            if block.kind == "python":
                return None  # a module a later command runs or a later block imports
        return getattr(self, f"_{block.kind}")(block)

    # -- executed --------------------------------------------------------------------------

    def _python(self, block):
        # Padded so that a traceback names the document's own line.
        code = compile("\n" * block.line + block.text, str(ROOT / block.document), "exec")
        printed = io.StringIO()
        with contextlib.ExitStack() as stack:
            if self.app is not None:
                stack.enter_context(self.app.app_context())
            stack.enter_context(contextlib.redirect_stdout(printed))
            exec(code, self.namespace)
        self.outputs[block.id] = printed.getvalue()
        return self.outputs[block.id]

    def _sh(self, block):
        env = {**self.env, **self.exported}
        if block.options.get("app") == "standalone":
            env.update(FLASK_APP="wsgi", __CWD=str(self.standalone))
        elif "app" in block.options:
            env["FLASK_APP"] = block.options["app"]
        if block.options.get("cwd") == "repository":  # a command run from the checkout's top level
            env.update(__CWD=str(ROOT), PYTEST_ADDOPTS="-p no:cacheprovider")  # no .pytest_cache left there
        lines = []
        for command in snippets.commands(block.text):
            for text, replacement in self.substitute.items():
                command = command.replace(text, replacement)
            lines.append(command)
        expected_exit = int(block.options.get("exit", 0))
        output = []
        for n, command in enumerate(lines):
            if SERVING.search(re.split(r"\s#", command)[0]):  # not a word of its trailing comment
                output.append(self.serve(block, command, env))
                continue
            text, status, env = self.command(command, env)
            output.append(text)
            wanted = expected_exit if n == len(lines) - 1 else 0
            assert status == wanted, f"{block}: `{command}` exited {status} (not {wanted}):\n{text[-5000:]}"
            self._remember(command, env)
        self.outputs[block.id] = "".join(output)
        return self.outputs[block.id]

    def command(self, command, env):
        """(output, exit status, the environment after it): run with bash in `cwd`, its `cd` and
        `export` kept for the next command, as in a reader's shell."""
        state = self.directory / ".shell-state"
        script = (f"cd {shlex.quote(self.cwd(env))}\n{command}\n__status=$?\n"
                  f"pwd > {state}.cwd; env -0 > {state}.env; exit $__status\n")
        done = subprocess.run(["bash", "-c", script], env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=COMMAND_TIMEOUT)
        after = dict(env)
        if Path(f"{state}.env").exists():
            after = dict(item.split("=", 1) for item in Path(f"{state}.env").read_text().split("\0") if "=" in item)
            after["__CWD"] = Path(f"{state}.cwd").read_text().strip()
            os.remove(f"{state}.env")
        return done.stdout, done.returncode, after

    def _remember(self, command, env):
        """What a reader has after `command` ran: the variables it exported, the user it created."""
        for name in re.findall(r"(?:^|[;&|]\s*)export\s+(\w+)=", command):
            self.exported[name] = env[name]
        words = shlex.split(re.split(r"\s#", command)[0])
        if words[:1] == ["flask"] and "users" in words and words[words.index("users") + 1:][:1] == ["create"] \
                and "--password" in words:
            self.users[words[words.index("users") + 2]] = words[words.index("--password") + 1]

    def cwd(self, env):
        return env.get("__CWD") or str(self.directory)

    def serve(self, block, command, env):
        """Start a serving command, check it, stop it with SIGTERM; its output. The checks:
        `serve=dashboard:PREFIX`, the admin screen at PREFIX signed into in Chromium and its
        dashboard opened (its text in `pages[block.id]`); `serve=log:TEXT`, TEXT in its output (`+`
        for a space), for a worker."""
        check = block.options.get("serve", "")
        assert check.startswith(("dashboard:", "log:")), \
            f"{block}: `{command}` serves until stopped: say how to check it (serve=dashboard:PREFIX or serve=log:TEXT)"
        log = open(self.directory / f".serve-{block.id}.log", "w+")
        proc = subprocess.Popen(["bash", "-c", command], cwd=self.cwd(env), env=env, stdin=subprocess.DEVNULL,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            deadline = time.monotonic() + SERVE_TIMEOUT
            while not self._answers(check, log):
                assert proc.poll() is None, f"{block}: `{command}` exited {proc.returncode}:\n{self._read(log)}"
                assert time.monotonic() < deadline, \
                    f"{block}: `{command}` did not answer {check} in {SERVE_TIMEOUT} s:\n{self._read(log)}"
                time.sleep(0.1)
            if check.startswith("dashboard:"):
                self.pages[block.id] = self.open_dashboard(block, check.removeprefix("dashboard:").rstrip("/"), log)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                raise AssertionError(f"{block}: `{command}` was still running {STOP_TIMEOUT} s after SIGTERM")
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # anything of its group that outlived it
        output = self._read(log)
        log.close()
        # bash itself, when the command is not exec'd, ends by the signal.
        assert proc.returncode in (0, -signal.SIGTERM), f"{block}: `{command}` exited {proc.returncode}:\n{output}"
        return output

    def _answers(self, check, log):
        if check.startswith("log:"):
            return check[4:].replace("+", " ") in self._read(log)
        try:  # any answer at all: what a person sees there is the browser's to check
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{check.removeprefix('dashboard:')}/",
                                        timeout=10):
                return True
        except urllib.error.HTTPError:
            return True
        except (urllib.error.URLError, OSError):
            return False

    def open_dashboard(self, block, prefix, log):
        """Sign in to the admin screen at `prefix` in Chromium, as the document tells a reader to,
        and open its dashboard: the dashboard's text."""
        context = self.browser().new_context(base_url=f"http://127.0.0.1:{self.port}")
        try:
            page = context.new_page()
            (self.sign_in or self._sign_in_as_the_user_made)(block, page, prefix)
            response = page.goto(prefix + "/")
            assert (response.status, page.title()) == (200, "Dashboard · jobsweb"), (
                f"{block}: signed in, {prefix}/ answered {response.status} at {page.url}:\n"
                f"{page.inner_text('body')[:3000]}\n--- the server's output:\n{self._read(log)[-5000:]}")
            return page.inner_text("main")
        finally:
            context.close()

    def _sign_in_as_the_user_made(self, block, page, prefix):
        assert self.users, f"{block}: no `users create EMAIL --password ...` ran before it: whom does a reader sign in as?"
        email, password = list(self.users.items())[-1]
        response = page.goto(prefix + "/")
        assert response.status == 200 and f"{prefix}/sign-in" in page.url, (
                f"{block}: {prefix}/ answered {response.status} at {page.url}, not the sign-in page:\n"
                f"{page.inner_text('body')[:3000]}")
        page.get_by_label("Email").fill(email)
        page.get_by_label("Password").fill(password)
        page.get_by_role("button", name="Sign in").click()
        page.wait_for_load_state()

    @staticmethod
    def _read(log):
        log.flush()
        log.seek(0)
        return log.read()

    def _jinja(self, block):
        from flask import render_template_string

        with self.app.test_request_context():
            self.outputs[block.id] = render_template_string(block.text, **self.jinja_context)
        return self.outputs[block.id]

    def _sql(self, block):
        with psycopg.connect(self.url) as conn:
            try:
                cursor = conn.execute(block.text)
                self.outputs[block.id] = cursor.fetchall() if cursor.description else []
            finally:
                conn.rollback()
        return self.outputs[block.id]

    # -- checked ---------------------------------------------------------------------------

    def _text(self, block):
        source = block.options.get("output-of")
        if source is None:
            return None  # a literal
        assert source in self.outputs, f"{block}: output-of={source}, a block that has not run before it"
        actual = self.outputs[source]
        assert snippets.output_matches(block.text, actual), (
            f"{block}: the output of {source} does not read as the document shows.\n"
            f"--- the document:\n{block.text}--- the real output:\n{actual}")
        return actual

    def _procfile(self, block):
        assert snippets.procfile_lines(block.text) == snippets.procfile_lines((ROOT / "Procfile").read_text()), \
            f"{block} is not ./Procfile:\n{block.text}--- ./Procfile:\n{(ROOT / 'Procfile').read_text()}"

    def _parsed(self, block):
        self.parsed[block.id] = snippets.parsed(block)
        return self.parsed[block.id]

    _json = _yaml = _toml = _ini = _parsed

    def _mermaid(self, block):
        assert snippets.mermaid_problems(block.text) == [], block

    def close(self):
        sys.modules.pop(self.module.__name__, None)
        sys.path.remove(str(self.directory))
        for name, module in list(sys.modules.items()):  # modules blocks wrote: another document may write its own
            if str(getattr(module, "__file__", None) or "").startswith(str(self.directory)):
                del sys.modules[name]
        with self.app.app_context():
            from jobsweb.core.database import db

            db.engine.dispose()


@pytest.fixture(scope="module")
def docs(request, postgres_server, tmp_path_factory):
    """The Runner of this module's document: a scratch database `jobsweb_docs_<module>` on the
    suite's server (jobsweb's tables made, unless the module sets DOCS_MIGRATED = False), a
    scratch directory holding docs_host.py (the scratch host app) and standalone/ (wsgi.py,
    gunicorn.conf.py). The job types its blocks register are forgotten after."""
    from jobsweb.engine.jobs import registry
    from jobsweb.testing import create_schema

    name = request.module.__name__.rsplit(".", 1)[-1].removeprefix("test_")
    admin, _ = postgres_server
    database = f"jobsweb_docs_{name}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {database}")
    url = libpq_url(database_url(make_url(admin).set(database=database).render_as_string(hide_password=False)))
    directory = tmp_path_factory.mktemp(f"docs-{name}")
    shutil.copy(Path(__file__).with_name("scratch_host.py"), directory / "docs_host.py")
    (directory / "standalone").mkdir()
    for file in ("wsgi.py", "gunicorn.conf.py"):
        shutil.copy(ROOT / file, directory / "standalone" / file)
    saved = dict(registry._registry)
    runner = Runner(name, url, directory)
    runner.browser = lambda: request.getfixturevalue("browser")  # started only for a check that signs in
    if getattr(request.module, "DOCS_MIGRATED", True):  # False: the document's own blocks migrate
        with runner.app.app_context():
            create_schema()
    yield runner
    runner.close()
    registry._registry.clear()
    registry._registry.update(saved)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")
