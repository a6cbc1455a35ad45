"""Helpers for tests/test_hosted_settings.py: the app's own role and database on a fresh server,
jobsweb's real processes pointed at it, a signed-in HTTP client, and which process holds which
server connection."""

import http.cookiejar
import os
import re
import signal
import socket
import subprocess
import threading
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import psycopg
from sqlalchemy.engine import make_url

from jobsweb import create_app
from jobsweb.core.database import database_url, db
from jobsweb.web.accounts import create_user, find_user
from tests.conftest import EVENT_TIMEOUT, SECRET_KEY, TEST_SETTINGS, committed, wait_for
from tests.forkserver import python_m, run_python_m

# A hosted database hands the app an ordinary role that owns its database, never a superuser:
# superuser_reserved_connections are not the app's, and ALTER ROLE settings apply to it.
APP_ROLE = "app"
APP_PASSWORD = "app-password"
APP_DATABASE = "jobsweb"
ADMIN_EMAIL = "admin@example.com"
ADMIN_PASSWORD = "correct horse battery"
PAGES = ("/", "/runs", "/definitions", "/incidents", "/workers", "/queues", "/healthz")


def app_database(server, role_settings=None, query=None):
    """Create the app's role (with `role_settings`) and its database on `server`; the app's libpq
    URL to it, with `query` parameters (sslmode=..., application_name=...)."""
    admin = server.get_uri("postgres")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {APP_ROLE} LOGIN PASSWORD '{APP_PASSWORD}'")
        conn.execute(f"CREATE DATABASE {APP_DATABASE} OWNER {APP_ROLE}")
        for name, value in (role_settings or {}).items():
            conn.execute(f"ALTER ROLE {APP_ROLE} SET {name} = '{value}'")
    url = make_url(admin).set(username=APP_ROLE, password=APP_PASSWORD, database=APP_DATABASE)
    return url.update_query_dict(query or {}).set(drivername="postgresql").render_as_string(hide_password=False)


def environment(url, **settings):
    """The environment of a jobsweb process using `url` as DATABASE_URL."""
    return {**os.environ, **TEST_SETTINGS, "DATABASE_URL": url, "SECRET_KEY": SECRET_KEY,
            **{name: str(value) for name, value in settings.items()}}


def flask(url, *args, timeout=EVENT_TIMEOUT, **settings):
    """Run one `flask` command to completion; (exit code, output)."""
    return run_python_m("flask", ["--app", "wsgi", *args], env=environment(url, **settings), timeout=timeout)


def prepare(url):
    """Migrate as a release phase would (`flask jobs migrate`), then add the table
    tests/job_types.py records into and an admin user; all as the app's own role. Again on the
    same database (a module's server is shared by its tests), it only migrates."""
    code, output = flask(url, "jobs", "migrate")
    assert code == 0, output
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS test_executions (run_id bigint NOT NULL, pid integer NOT NULL, "
                     "at timestamptz NOT NULL DEFAULT clock_timestamp())")
    # In this process: `flask users create` would cost another interpreter's start-up.
    app = create_app({"SQLALCHEMY_DATABASE_URI": database_url(url), "TESTING": True, "SECRET_KEY": SECRET_KEY})
    with committed(app):
        if find_user(ADMIN_EMAIL) is None:
            create_user(ADMIN_EMAIL, ADMIN_PASSWORD, "admin")
    with app.app_context():
        db.engine.dispose()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Processes:
    """jobsweb's long-running processes for one test, each logging to a file; all stopped by stop()."""

    def __init__(self, folder):
        self.folder = Path(folder)
        self.running = []
        self.loads = []

    def _start(self, name, module, args, env):
        log = open(self.folder / f"{name}.log", "w+")
        proc = python_m(module, args, env=env, stdout=log, stderr=subprocess.STDOUT)
        proc.log_path = log.name
        self.running.append((proc, log))
        return proc

    def worker(self, url, *args, **settings):
        return self._start("worker", "flask", ["--app", "wsgi", "run-jobs", *args], environment(url, **settings))

    def gunicorn(self, url, **settings):
        """The repository's gunicorn.conf.py serving wsgi:app (WEB_CONCURRENCY processes of
        WEB_THREADS threads), its alert thread on as in production; (process, base URL) once it answers."""
        port = free_port()
        env = environment(url, PORT=port, JOBSWEB_WEB_ALERTS="true", **settings)
        proc = self._start("gunicorn", "gunicorn", ["--bind", f"127.0.0.1:{port}", "wsgi:app"], env)
        base = f"http://127.0.0.1:{port}"
        wait_for(lambda: proc.poll() is not None or status(base + "/healthz") == 200, message="gunicorn to answer")
        assert proc.poll() is None, log_of(proc)
        return proc, base

    def load(self, base, clients):
        """Load(base, clients), stopped before the servers are."""
        self.loads.append(Load(base, clients))
        return self.loads[-1]

    def stop(self):
        for load in self.loads:
            load.stop()
        for proc, log in self.running:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc, log in self.running:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            log.close()


def log_of(proc):
    return Path(proc.log_path).read_text()


def status(url):
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return None


class Browser:
    """An admin signed in to a real server over HTTP: get(path) -> (status, body)."""

    def __init__(self, base):
        self.base = base
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
        _, html = self.get("/sign-in")
        token = re.search(r'name="csrf-token" content="([^"]+)"', html).group(1)
        form = urllib.parse.urlencode({"email": ADMIN_EMAIL, "password": ADMIN_PASSWORD, "csrf_token": token})
        code, html = self._open(urllib.request.Request(base + "/sign-in", data=form.encode()))
        assert code == 200 and self.get("/")[0] == 200, (code, html[:500])

    def get(self, path):
        return self._open(urllib.request.Request(self.base + path))

    def _open(self, request):
        """(status, body); a page that sent us to sign in (signed out) counts as a 401."""
        try:
            with self.opener.open(request, timeout=30) as response:
                signed_out = urllib.parse.urlsplit(response.geturl()).path == "/sign-in" and request.data is None \
                    and not request.full_url.endswith("/sign-in")
                return (401 if signed_out else response.status), response.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()


class Load:
    """`clients` signed-in admins, each on its own thread, loading PAGES in turn until stop();
    every answer that is not a 200 is kept in `failures`."""

    def __init__(self, base, clients):
        self.stopping = threading.Event()
        self.loaded = 0
        self.failures = []
        browsers = [Browser(base) for _ in range(clients)]
        self.threads = [threading.Thread(target=self._browse, args=(b,), daemon=True) for b in browsers]
        for thread in self.threads:
            thread.start()

    def _browse(self, browser):
        while not self.stopping.is_set():
            for path in PAGES:
                code, body = browser.get(path)
                self.loaded += 1  # one writer per increment is enough for a rough count
                if code != 200:
                    self.failures.append((path, code, body[:300]))

    def stop(self):
        self.stopping.set()
        for thread in self.threads:
            thread.join(timeout=60)
        return self.loaded


# -- who holds which connection --------------------------------------------------------------

def _socket_ports():
    """{socket inode: local TCP port} of every IPv4 TCP socket on this host."""
    ports = {}
    with open("/proc/net/tcp") as table:
        next(table)
        for line in table:
            fields = line.split()
            ports[fields[9]] = int(fields[1].rsplit(":", 1)[1], 16)
    return ports


def _children(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(child) for child in f.read().split()]
    except OSError:
        return []


def _ports_of(pid, ports):
    """The local TCP ports of process `pid`'s open sockets."""
    held = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue  # closed meanwhile
            if target.startswith("socket:["):
                port = ports.get(target[8:-1])
                if port is not None:
                    held.add(port)
    except OSError:
        pass  # the process exited
    return held


class ConnectionCensus:
    """Looks at the app role's server connections every few milliseconds until stop(), and
    finds which of `processes` ({label: pid}; a gunicorn master's children are "<label> child N")
    holds each. Keeps each process's peak count, the peak of them all, and every connection
    seen (`seen`: {label: {backend pid: (ssl, application_name)}}).

    It looks from a superuser connection (`admin`), which takes a slot of its own, not one of
    the app's: a superuser may use superuser_reserved_connections."""

    QUERY = ("SELECT a.pid, a.client_port, s.ssl, a.application_name FROM pg_stat_activity a "
             "JOIN pg_stat_ssl s ON s.pid = a.pid WHERE a.usename = %s")
    UNKNOWN = "not ours, or closed while counted"

    def __init__(self, admin, processes=(), role=APP_ROLE):
        self.processes = dict(processes)
        self.role = role
        self.peaks = {}
        self.peak_total = 0
        self.seen = {}
        self.stopping = threading.Event()
        self.conn = psycopg.connect(admin, autocommit=True)
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()

    def watch(self, label, pid):
        """Count `pid`'s connections too (a process started after the census)."""
        self.processes = {**self.processes, label: pid}

    def _pids(self):
        pids = {}
        for label, pid in self.processes.items():
            pids[pid] = label
            for n, child in enumerate(sorted(_children(pid)), 1):
                pids[child] = f"{label} child {n}"
        return pids

    def _owners(self):
        """{local port: label} of the watched processes' TCP sockets."""
        ports = _socket_ports()
        return {port: label for pid, label in self._pids().items() for port in _ports_of(pid, ports)}

    def _watch(self):
        while not self.stopping.is_set():
            # Who held which port, looked up before and after the query: a connection the query
            # saw was open at one of the two moments, unless it lived less than the query took.
            owner = self._owners()
            rows = self.conn.execute(self.QUERY, [self.role]).fetchall()
            owner.update(self._owners())
            counts = {}
            for backend, client_port, ssl, application_name in rows:
                label = owner.get(client_port, self.UNKNOWN)
                counts[label] = counts.get(label, 0) + 1
                self.seen.setdefault(label, {})[backend] = (ssl, application_name)
            for label, count in counts.items():
                self.peaks[label] = max(self.peaks.get(label, 0), count)
            self.peak_total = max(self.peak_total, len(rows))
            self.stopping.wait(0.01)

    def stop(self):
        self.stopping.set()
        self.thread.join()
        self.conn.close()
