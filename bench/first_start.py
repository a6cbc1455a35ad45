"""First start: `make run` in a fresh clone, timed as a whole process until its sign-in page answers.

    python -m bench.first_start [--runs 5] [--cold-runs 1] [--write docs/BENCHMARKS.md]

Each run clones this repository's committed HEAD into a scratch folder (no .venv, no instance/),
starts `make run` there as a newcomer would (only its port changed, by FLASK_DEV_PORT, so that it
cannot meet another server on 5000), and takes the seconds from that start until GET /sign-in
answers 200: the venv, uv and the install of the run extras, the embedded PostgreSQL's initdb, the
migrations, the demo runs and gunicorn all count. It also notes when the venv and the install were
done (their files appearing) and the load average. Warm runs use the package caches as they are
on this machine (their sizes are reported); cold runs give pip and uv empty caches of their own,
as on a machine that never installed anything. Then Ctrl-C (SIGINT to make's process group, as a
terminal sends it) stops the run. `make bench` runs it after the suite and writes its section
into docs/BENCHMARKS.md.
"""

import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HEADING = "## First start: `make run` from a fresh clone"
TARGET = 60.0  # seconds, issue 36: first page from a fresh clone, the venv included
GIVE_UP = 900.0  # seconds: a run that has not answered by then is reported as failed
STOP_WINDOW = 60.0  # seconds make run has to stop after Ctrl-C before it is killed


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def answers(url):
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def caches():
    """'uv N MB, pip M MB': the package caches a warm run finds (their default places)."""
    home = Path.home() / ".cache"
    sizes = []
    for name, where in (("uv", os.environ.get("UV_CACHE_DIR") or home / "uv"),
                        ("pip", os.environ.get("PIP_CACHE_DIR") or home / "pip")):
        where = Path(where)
        size = sum(f.stat().st_size for f in where.rglob("*") if f.is_file()) if where.is_dir() else 0
        sizes.append(f"{name} {size / 1e6:.0f} MB" if size else f"{name} empty")
    return ", ".join(sizes)


def one_run(work, log, cold):
    """Seconds from `make run` to the sign-in page, with when the venv and the install were done."""
    clone = work / "clone"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True)
    port = free_port()
    # A newcomer's shell: none of this session's database, app or venv settings.
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("JOBSWEB_", "FLASK_", "DATABASE_URL", "TEST_DATABASE_URL", "VIRTUAL_ENV", "PYTHON",
                                "UV_", "PIP_CACHE_DIR"))}
    env["FLASK_DEV_PORT"] = str(port)
    if cold:
        env.update(UV_CACHE_DIR=str(work / "uv-cache"), PIP_CACHE_DIR=str(work / "pip-cache"))
    load = os.getloadavg()
    before = "empty" if cold else caches()
    marks = {"venv": clone / ".venv" / "bin" / "pip", "installed": clone / ".venv" / ".installed-run"}
    seen = {}
    with open(log, "w") as out:
        started = time.monotonic()
        make = subprocess.Popen(["make", "run"], cwd=clone, env=env, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            while True:
                elapsed = time.monotonic() - started
                for name, path in marks.items():
                    if name not in seen and path.exists():
                        seen[name] = elapsed
                if answers(f"http://127.0.0.1:{port}/sign-in"):
                    break
                if make.poll() is not None:
                    raise RuntimeError(f"make run exited {make.returncode} before answering: see {log}")
                if elapsed > GIVE_UP:
                    raise RuntimeError(f"no sign-in page after {GIVE_UP:.0f} s: see {log}")
                time.sleep(0.1)
        finally:
            stop(make, clone)
    return {"seconds": elapsed, "load": load, "cold": cold, "caches": before,
            **{f"{name}_seconds": value for name, value in seen.items()}}


def stop(make, clone):
    """Ctrl-C to make's process group; killed if it has not stopped in STOP_WINDOW seconds, and
    the embedded PostgreSQL it started stopped if it outlived it."""
    try:
        os.killpg(make.pid, signal.SIGINT)
        make.wait(timeout=STOP_WINDOW)
    except ProcessLookupError:
        pass
    except subprocess.TimeoutExpired:
        os.killpg(make.pid, signal.SIGKILL)
        make.wait()
    pid_file = clone / "instance" / "pgdata" / "postmaster.pid"
    if pid_file.exists():
        postmaster = int(pid_file.read_text().split()[0])
        try:
            os.kill(postmaster, signal.SIGQUIT)
        except ProcessLookupError:
            pass


def summary(runs):
    seconds = [r["seconds"] for r in runs]
    return min(seconds), statistics.median(seconds), max(seconds)


def section(results):
    """The Markdown section for docs/BENCHMARKS.md."""
    warm = [r for r in results["runs"] if not r["cold"]]
    cold = [r for r in results["runs"] if r["cold"]]
    lines = [
        HEADING, "",
        f"Measured on {results['when']} by `python -m bench.first_start` (`make bench` runs it after the suite), "
        f"git revision `{results['revision']}`, {results['cpus']} CPUs, Python {results['python']}, on a machine "
        "shared with other test runs (the load average at each start is in the table). Each run is a `git clone` "
        "of the repository, then `make run` in the clone (only its port moved, by `FLASK_DEV_PORT`), timed as a "
        "whole process from `make run`'s start until `GET /sign-in` answers 200: creating `.venv`, pip installing "
        "uv into it, uv installing jobsweb with the `embedded` and `server` extras, the embedded PostgreSQL's "
        "initdb, the migrations, the demo admin and runs, and gunicorn's start. *Warm* runs find the package "
        "caches as this machine has them; *cold* runs give pip and uv empty caches, so every package comes from "
        "the index, as on a machine that never installed anything.",
        "",
        "| runs | min (s) | median (s) | max (s) | target |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name, runs in (("warm", warm), ("cold", cold)):
        if runs:
            low, middle, high = summary(runs)
            verdict = "met" if high <= TARGET else "**not met**"
            lines.append(f"| {len(runs)} {name} | {low:.1f} | {middle:.1f} | {high:.1f} | ≤ {TARGET:.0f}: {verdict} |")
    lines += ["", "| run | caches | to sign-in page (s) | venv made (s) | install done (s) | "
                  "load average (1, 5, 15 min) at start |", "| --- | --- | --- | --- | --- | --- |"]
    for n, r in enumerate(results["runs"], 1):
        load = ", ".join(f"{x:.1f}" for x in r["load"])
        caches_then = "cold" if r["cold"] else f"warm ({r['caches']})"
        lines.append(f"| {n} | {caches_then} | {r['seconds']:.1f} | {r.get('venv_seconds', float('nan')):.1f} | "
                     f"{r.get('installed_seconds', float('nan')):.1f} | {load} |")
    lines += ["", "After the install, the rest of each run is `flask dev`: the embedded server's initdb and start, "
              "the migrations, the demo admin and runs, then gunicorn and a worker.", ""]
    return "\n".join(lines)


def write(path, text):
    """Put the section into path: in place of an earlier one, else at the end."""
    old = path.read_text() if path.exists() else ""
    if HEADING in old:
        before, rest = old.split(HEADING, 1)
        after = rest.split("\n## ", 1)
        tail = "\n## " + after[1] if len(after) == 2 else ""
        new = before + text + tail
    else:
        new = old.rstrip("\n") + "\n\n" + text
    path.write_text(new)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bench.first_start")
    parser.add_argument("--runs", type=int, default=5, help="runs with the package caches as they are")
    parser.add_argument("--cold-runs", type=int, default=1, help="runs with empty package caches, first")
    parser.add_argument("--write", type=Path, help="put the section into this Markdown file (docs/BENCHMARKS.md)")
    args = parser.parse_args(argv)
    if args.runs < 0 or args.cold_runs < 0 or args.runs + args.cold_runs < 1:
        parser.error("--runs, --cold-runs: at least one run in all")
    results = {
        "when": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "revision": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                   text=True).stdout.strip() or "unknown",
        "cpus": os.cpu_count(), "python": sys.version.split()[0], "runs": [],
    }
    for n, cold in enumerate([True] * args.cold_runs + [False] * args.runs, 1):
        work = Path(tempfile.mkdtemp(prefix="jobsweb-first-start-"))
        try:
            run = one_run(work, work.parent / f"{work.name}.log", cold)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        results["runs"].append(run)
        print(f"run {n} ({'cold' if cold else 'warm: ' + run['caches']}): sign-in page after {run['seconds']:.1f} s "
              f"(venv {run.get('venv_seconds', 0):.1f} s, installed {run.get('installed_seconds', 0):.1f} s), "
              f"load {run['load'][0]:.1f}", flush=True)
    for name in ("cold", "warm"):
        runs = [r for r in results["runs"] if r["cold"] == (name == "cold")]
        if runs:
            low, middle, high = summary(runs)
            print(f"first start, {name} caches (make run from a fresh clone to its sign-in page): min {low:.1f} s, "
                  f"median {middle:.1f} s, max {high:.1f} s of {len(runs)} runs (target ≤ {TARGET:.0f} s)", flush=True)
    if args.write:
        write(args.write, section(results))
        print(f"wrote its section into {args.write}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
