"""Run the benchmark suite: `python -m bench [--quick] [--out DIR]` (make bench / make bench-quick).

Runs every measure once on each server jobsweb is measured on (tests/servers.py): the embedded
PostgreSQL, then Debian's stock PostgreSQL with JIT on; each is started fresh and durable, one
at a time, so that they never share the machine. Writes BENCHMARKS.md and PNG plots into --out
(docs/ by default), the two servers side by side. Quick mode uses small sizes and one repeat:
it proves the suite still runs (CI); only full mode's numbers mean anything.

`python -m bench --only tick` runs one measure that stands alone and prints its figures as
JSON, writing no report: for measuring a change to one hot path without the whole suite.
`--only peers,whole` runs several, in that order, on each server before the next server starts
(whole and cpu then race PgQueuer's best setting of peers, as the suite does).
`--servers stock` (or embedded) runs on that server only.
"""

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from . import (big_history, claim_conditions, measures, process_measures, report, run_control, search_cost, seams, soak,
               tick_start, workflows)
from .harness import FULL, QUICK, Bench
from .server import KINDS, Server

ROOT = Path(__file__).resolve().parent.parent

# The measures that need no other measure's results, for --only.
ALONE = {
    "throughput": measures.throughput, "peers": measures.peers, "history": measures.claim_latency,
    "enqueue": measures.enqueue, "wake": measures.wake_latency, "tick": measures.scheduler_tick,
    "queues": measures.flow_control, "pages": measures.admin_pages_alone,
    "async": process_measures.async_handlers, "whole": process_measures.whole_process,
    "cpu": process_measures.cpu_per_run, "cpu_without_admin": process_measures.cpu_without_admin,
    "alerts": process_measures.alerts_without_workers,
    "jit": claim_conditions.jit, "backlog": claim_conditions.backlog, "workflows": workflows.workflows,
    "seams": seams.wide_graph, "control": run_control.run_control, "search": search_cost.search_cost,
    "tick_start": tick_start.tick_start, "soak": soak.soak, "pages_big": big_history.pages_at_scale,
}


def git_revision():
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _printable(value):
    """`value` with every dict key a string: some measures key their figures by tuples."""
    if isinstance(value, dict):
        return {k if isinstance(k, str) else str(k): _printable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_printable(v) for v in value]
    return value


def suite(bench):
    """Every measure on bench's server: what the report shows for that server."""
    server = bench.server
    results = {"kind": server.kind, "pg_version": server.version(), "settings": server.describe()}
    settings = results["settings"]
    bench.log(f"PostgreSQL {results['pg_version']}, "
              + (f"JIT {settings['jit']}" if settings["jit_available"] else "built without JIT"))
    results["throughput"] = measures.throughput(bench)
    results["ceiling"] = measures.ceiling(bench, results["throughput"]["url"], *results["throughput"]["best"])
    results["peers"] = measures.peers(bench)
    results["history"] = measures.claim_latency(bench)
    results["pages"] = measures.admin_pages(bench, results["history"])
    results["enqueue"] = measures.enqueue(bench)
    results["wake"] = measures.wake_latency(bench)
    results["tick"] = measures.scheduler_tick(bench)
    results["queues"] = measures.flow_control(bench)
    results["async"] = process_measures.async_handlers(bench)
    results["whole"] = process_measures.whole_process(bench, results["peers"]["pgqueuer"]["setting"])
    results["cpu"] = process_measures.cpu_per_run(bench, results["peers"]["pgqueuer"]["setting"])
    results["alerts"] = process_measures.alerts_without_workers(bench)
    results["backlog"] = claim_conditions.backlog(bench)
    results["workflows"] = workflows.workflows(bench)
    results["seams"] = seams.wide_graph(bench)
    results["run_control"] = run_control.run_control(bench)
    results["search_cost"] = search_cost.search_cost(bench)
    results["pages_big"] = big_history.pages_at_scale(bench)
    results["tick_start"] = tick_start.tick_start(bench)
    results["soak"] = soak.soak(bench, results["throughput"])
    # Last: it switches the server's JIT settings (and puts them back as shipped).
    results["jit"] = claim_conditions.jit(bench)
    results["seconds"] = time.monotonic() - bench.started
    return results


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bench")
    parser.add_argument("--quick", action="store_true", help="small sizes, one repeat (CI)")
    parser.add_argument("--out", type=Path, default=ROOT / "docs", help="where BENCHMARKS.md and plots go")
    parser.add_argument("--only", type=_measures, metavar="MEASURE[,MEASURE...]",
                        help=f"run these measures alone and print their figures: {', '.join(sorted(ALONE))}")
    parser.add_argument("--servers", default=",".join(KINDS),
                        help=f"comma-separated, of {', '.join(KINDS)} (default: both, in that order)")
    args = parser.parse_args(argv)
    kinds = args.servers.split(",")
    if not set(kinds) <= set(KINDS):
        parser.error(f"--servers: one or both of {', '.join(KINDS)}")
    if missing := measures.missing_peers():
        parser.exit(2, f"python -m bench: {' and '.join(missing)} not installed: every run measures jobsweb "
                       "against them (pip install -e '.[bench]')\n")
    sizes, repeats = (QUICK, 1) if args.quick else (FULL, 3)
    results = {"mode": "quick" if args.quick else "full", "cpus": os.cpu_count(), "revision": git_revision(),
               "python": sys.version.split()[0], "sizes": sizes, "repeats": repeats, "servers": {}}
    print(f"{results['cpus']} CPUs, revision {results['revision']}, servers: {', '.join(kinds)}", flush=True)
    started = time.monotonic()
    for kind in kinds:
        server = Server.start(kind)
        bench = Bench(server, sizes, repeats, args.quick)
        try:
            if args.only:
                bench.log(f"PostgreSQL {server.version()}")
                figures = {}
                for name in args.only:
                    if name in ("whole", "cpu") and "peers" in figures:
                        figures[name] = ALONE[name](bench, figures["peers"]["pgqueuer"]["setting"])
                    else:
                        figures[name] = ALONE[name](bench)
                print(json.dumps(_printable(figures if len(figures) > 1 else figures[args.only[0]]), indent=2,
                                 default=str), flush=True)
            else:
                results["servers"][kind] = suite(bench)
        finally:
            server.stop()
    if not args.only:
        results["seconds"] = time.monotonic() - started
        path = report.write(results, args.out)
        print(f"wrote {path} in {results['seconds']:.0f} s", flush=True)
    return 0


def _measures(text):
    """--only's value: measures of ALONE, comma-separated."""
    names = text.split(",")
    if unknown := [name for name in names if name not in ALONE]:
        raise argparse.ArgumentTypeError(f"not a measure: {', '.join(unknown)} (choose from {', '.join(sorted(ALONE))})")
    return names


if __name__ == "__main__":
    sys.exit(main())

