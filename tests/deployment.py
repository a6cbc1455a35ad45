"""jobsweb as a team installs and deploys it, for the tests that must not see the checkout.

The suite imports jobsweb from the source tree, and its tests import their handlers in the same
process as the app they drive; a deployment does neither. So (issue 49):

- built_wheel(): the wheel of a copy of the files git tracks, built as `pip wheel .` would;
- install(): a fresh virtualenv with that wheel and the extras named, nothing of the checkout on
  its path;
- Deployment: an app directory outside the checkout holding what a team deploying the standalone
  app keeps there (the repository's Procfile and gunicorn.conf.py, a wsgi.py of its own, its
  handler module), whose Procfile lines run as separate processes, each with the environment a
  PaaS gives it. The handlers are imported by the worker alone (JOBSWEB_HANDLERS on the worker
  line only), as a web process that does not import a worker's modules runs.
"""

import os
import shutil
import signal
import socket
import subprocess
import sys
import zipfile
from pathlib import Path

from tests.conftest import ROOT, wait_for
from tests.hosted import status

UV = Path(sys.executable).parent / "uv"  # in make test's venv (Makefile)
SECRET_KEY = "0123456789abcdef-deployed-secret-key-0123456789-abcdef"
STOP_TIMEOUT = 30  # seconds: a PaaS's own, between SIGTERM and SIGKILL

# Where the wheel carries the folders kept beside jobsweb/ at the repository's top level
# (pyproject.toml's package-dir).
MAPPED = {"templates/": "jobsweb/templates/", "static/": "jobsweb/static/", "migrations/": "jobsweb/migrations/"}


def tracked_files():
    """The files git tracks or would track (new ones not yet added included), as paths from ROOT."""
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"], cwd=ROOT,
                            capture_output=True, check=True).stdout.decode().split("\0")
    return [name for name in listed if name and (ROOT / name).is_file()]


def source_copy(destination):
    """The tracked files, copied: no build/ or *.egg-info/ left by an editable install, whose file
    lists would otherwise put files in the wheel that its settings leave out."""
    for name in tracked_files():
        (destination / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, destination / name)
    return destination


def files_the_wheel_must_hold():
    """Every file of the package in the checkout, at the path the wheel gives it."""
    wanted = set()
    for name in tracked_files():
        if name.startswith("jobsweb/"):
            wanted.add(name)
        for folder, inside in MAPPED.items():
            if name.startswith(folder):
                wanted.add(inside + name.removeprefix(folder))
    return wanted


def files_in_wheel(wheel):
    """The wheel's files, its .dist-info left out."""
    with zipfile.ZipFile(wheel) as archive:
        return {name for name in archive.namelist() if ".dist-info/" not in name}


def built_wheel(work):
    """The wheel of this checkout, built from a copy of its tracked files into `work`/dist."""
    source = source_copy(work / "source")
    subprocess.run([UV, "build", "--wheel", "--quiet", "--out-dir", work / "dist", source], check=True, cwd=work)
    [wheel] = (work / "dist").glob("jobsweb-*.whl")
    return wheel


def install(wheel, venv, extras):
    """A fresh virtualenv at `venv` with `wheel[extras]` and its dependencies: its bin/ folder."""
    subprocess.run([UV, "venv", "--quiet", "--python", sys.executable, venv], check=True)
    subprocess.run([UV, "pip", "install", "--quiet", "--python", venv / "bin" / "python",
                    f"{wheel}[{','.join(extras)}]"], check=True, cwd=venv.parent)
    return venv / "bin"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# The team's own files. wsgi.py: the standalone app, with the error tracker and tracing a team
# sets up where it builds the app (REFERENCE, "Sentry and OpenTelemetry"); their SDKs are the
# real ones, with a transport and an exporter that append what they are given to files of
# OBSERVED_DIR instead of sending it anywhere.
TEAM_WSGI = '''\
from jobsweb import create_app
from jobsweb.integrations import otel, sentry

import observed

observed.start()
app = create_app()
sentry.init_app(app)
otel.init_app(app)
'''

OBSERVED = '''\
"""Sentry events and OpenTelemetry spans, each a JSON line in a file of OBSERVED_DIR."""
import json
import os
from pathlib import Path

import sentry_sdk
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from sentry_sdk.transport import Transport


def _append(name, record):
    with open(Path(os.environ["OBSERVED_DIR"]) / name, "a") as file:
        file.write(json.dumps(record, default=str) + "\\n")


class KeptEvents(Transport):
    def capture_envelope(self, envelope):
        for item in envelope.items:
            if item.type == "event":
                _append("sentry.jsonl", item.payload.json)


class KeptSpans(SpanExporter):
    def export(self, spans):
        for span in spans:
            _append("spans.jsonl", {"name": span.name, "attributes": dict(span.attributes)})
        return SpanExportResult.SUCCESS


def start():
    sentry_sdk.init(dsn="https://key@sentry.example/1", transport=KeptEvents, traces_sample_rate=0)
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(KeptSpans()))
    trace.set_tracer_provider(provider)
'''

# The team's handlers; only the worker imports them. Each import is written down, so that a test
# can tell which processes imported them.
BILLING = '''\
import os
import sys

from jobsweb import job

with open(os.path.join(os.environ["OBSERVED_DIR"], "billing-imports"), "a") as file:
    file.write(f"{os.getpid()} {os.path.basename(sys.argv[0])}\\n")


@job("billing.send_invoice")
def send_invoice(ctx):
    """Sends one invoice."""
    return {"sent": ctx.payload.get("invoice")}


@job("billing.export", max_attempts=3, backoff_base=0.2, backoff_cap=0.2)
def export(ctx):
    """Uploads the month's export; the first upload is refused."""
    if ctx.attempt == 1:
        raise ValueError("upload refused")
    return {"rows": 3}
'''


class Deployment:
    """An app directory holding a team's standalone deployment of the installed wheel, and the
    processes of its Procfile, started on demand and stopped by stop()."""

    def __init__(self, bin, directory, database_url):
        self.bin = bin
        self.directory = directory
        self.database_url = database_url  # a libpq URL, as a PaaS add-on gives it
        self.observed = directory / "observed"
        self.observed.mkdir(parents=True)
        for name in ("Procfile", "gunicorn.conf.py"):
            shutil.copy2(ROOT / name, directory / name)
        (directory / "wsgi.py").write_text(TEAM_WSGI)
        (directory / "observed.py").write_text(OBSERVED)
        (directory / "billing.py").write_text(BILLING)
        self.processes = {}

    def procfile(self):
        """{process type: command line}, read from the Procfile as a PaaS reads it."""
        lines = (self.directory / "Procfile").read_text().splitlines()
        return dict(line.split(":", 1) for line in lines if line.strip() and not line.startswith("#"))

    def environment(self, **extra):
        """What every process gets: the platform's variables and the venv's bin first on PATH,
        nothing of the checkout or of the test run (no PYTHONPATH, FLASK_APP, JOBSWEB_*)."""
        env = {key: value for key, value in os.environ.items()
               if not key.startswith(("JOBSWEB_", "FLASK_", "PYTHON", "VIRTUAL_ENV", "TEST_"))}
        env.update(PATH=f"{self.bin}{os.pathsep}{env['PATH']}", DATABASE_URL=self.database_url,
                   SECRET_KEY=SECRET_KEY, OBSERVED_DIR=str(self.observed))
        env.update(extra)
        return env

    def run(self, command, **extra):
        """A one-off command in the app directory (a release phase's, `heroku run`'s)."""
        return subprocess.run(command, shell=True, cwd=self.directory, env=self.environment(**extra),
                              capture_output=True, text=True, timeout=120)

    def start(self, process_type, **extra):
        """The Procfile's `process_type` line as a process of its own, its output in a log file."""
        log = open(self.directory / f"{process_type}.log", "w")
        process = subprocess.Popen(["/bin/sh", "-c", f"exec {self.procfile()[process_type].strip()}"],
                                   cwd=self.directory, env=self.environment(**extra), stdout=log,
                                   stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        self.processes[process_type] = process
        return process

    def web(self):
        """The web line on a free port, once it answers: its base URL. (A browser sent to it at
        once was refused under make test's load: the worker had registered before gunicorn listened.)"""
        port = free_port()
        process = self.start("web", PORT=str(port), WEB_CONCURRENCY="1")
        base = f"http://127.0.0.1:{port}"
        wait_for(lambda: process.poll() is not None or status(f"{base}/healthz") is not None, timeout=60,
                 message="the web process to answer")
        assert process.poll() is None, self.log("web")
        return base

    def log(self, process_type):
        return (self.directory / f"{process_type}.log").read_text()

    def imported_handlers(self):
        """The names of the programs (flask, gunicorn) whose processes imported billing.py."""
        marks = self.observed / "billing-imports"
        return sorted({line.split(" ", 1)[1] for line in marks.read_text().splitlines()}) if marks.exists() else []

    def stop(self):
        """SIGTERM each process, as a platform does, and wait for it."""
        for process in self.processes.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in self.processes.values():
            try:
                process.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
