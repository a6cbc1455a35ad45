"""Run the reliability drills at full size and print their figures.

    python drills/run.py                      # every drill, the issue's sizes
    python drills/run.py chaos --chaos-jobs 5000 --kill-every 2
    python drills/run.py --server stock       # on Debian's PostgreSQL 15 (JIT on), not the embedded one
    make drills DRILLS="chaos storm"

Each drill is a test (in tests/reliability, and the outage tests in tests/ which start servers
of both kinds themselves); its short form runs in `make test`. This script
runs the same tests with the sizes below (through DRILL_* variables), collects the figures
each drill records, and prints them as a table.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

DRILLS = {  # name -> test file under tests/
    "chaos": "reliability/test_chaos.py",
    "restart": "reliability/test_database_restart.py",
    "rehearsal": "reliability/test_restart_rehearsal.py",
    "storm": "reliability/test_cron_storm.py",
    "lease": "reliability/test_lost_lease.py",
    "deploy": "reliability/test_deploy.py",
    "input": "reliability/test_bad_input.py",
    "dst": "reliability/test_dst_walk.py",
    "workflows": "reliability/test_workflow_kills.py",
    # Outages and faults on the path. Each starts private servers of both kinds itself, so these
    # run on the embedded and the stock server whatever --server says.
    "down": "test_database_down.py",
    "stop-in-outage": "test_stop_during_outage.py",
    "network": "test_network_faults.py",
    "web-outage": "test_web_outage.py",
    "exec-outage": "test_exec_outage.py",
    "slots": "test_server_limits.py",
    "failover": "test_failover.py",
}


def arguments():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("drills", nargs="*", metavar="DRILL", help="which drills (default: all)")
    parser.add_argument("--server", choices=("embedded", "stock"),
                        default=os.environ.get("TEST_SERVER", "embedded"),
                        help="the PostgreSQL the drills start (tests/servers.py)")
    parser.add_argument("--chaos-jobs", type=int, default=20_000)
    parser.add_argument("--kill-every", type=float, default=2.0, help="seconds between kills, on average")
    parser.add_argument("--chaos-max-sleep", type=float, default=0.01,
                        help="seconds a chaos handler sleeps at most")
    parser.add_argument("--workflow-batches", type=int, default=200)
    parser.add_argument("--workflow-members", type=int, default=100, help="members per batch")
    parser.add_argument("--workflow-kill-every", type=float, default=1.0, help="seconds between kills, on average")
    parser.add_argument("--restart-jobs", type=int, default=5_000)
    parser.add_argument("--storm-rounds", type=int, default=200)
    parser.add_argument("--deploy-jobs", type=int, default=1_000)
    parser.add_argument("--down-jobs", type=int, default=2_000, help="runs under way when the database stops")
    parser.add_argument("--down-seconds", type=float, default=10.0, help="seconds the database stays stopped")
    parser.add_argument("--examples", type=int, default=2_000, help="hypothesis examples per property")
    parser.add_argument("--form-examples", type=int, default=300, help="hypothesis examples per form")
    parser.add_argument("--failover-runs", type=int, default=5_000, help="runs drained across the failover")
    parser.add_argument("--failover-lost", type=int, default=100,
                        help="finishes the old primary acknowledges after streaming pauses (0: no pause)")
    parser.add_argument("--dst-hours", type=int, default=26,
                        help="hours walked minute by minute either side of each clock change")
    parser.add_argument("--dst-zones", choices=["named", "all"], default="all",
                        help="the drill's named zones, or every zone that changes its clock in 2026")
    return parser.parse_args()


def main():
    args = arguments()
    unknown = set(args.drills) - set(DRILLS)
    if unknown:
        sys.exit(f"unknown drill(s) {', '.join(sorted(unknown))}; known: {', '.join(DRILLS)}")
    chosen = args.drills or list(DRILLS)
    figures = Path(tempfile.mkstemp(prefix="jobsweb-drills-", suffix=".jsonl")[1])
    env = {**os.environ, "TEST_SERVER": args.server, "DRILL_FIGURES": str(figures),
           "DRILL_CHAOS_JOBS": str(args.chaos_jobs), "DRILL_CHAOS_KILL_EVERY": str(args.kill_every),
           "DRILL_CHAOS_MAX_SLEEP": str(args.chaos_max_sleep), "DRILL_RESTART_JOBS": str(args.restart_jobs),
           "DRILL_WORKFLOW_BATCHES": str(args.workflow_batches), "DRILL_WORKFLOW_MEMBERS": str(args.workflow_members),
           "DRILL_WORKFLOW_KILL_EVERY": str(args.workflow_kill_every),
           "DRILL_STORM_ROUNDS": str(args.storm_rounds), "DRILL_DEPLOY_QUICK_JOBS": str(args.deploy_jobs),
           "DRILL_DOWN_JOBS": str(args.down_jobs), "DRILL_DOWN_SECONDS": str(args.down_seconds),
           "DRILL_PROPERTY_EXAMPLES": str(args.examples), "DRILL_FORM_EXAMPLES": str(args.form_examples),
           "DRILL_FAILOVER_RUNS": str(args.failover_runs), "DRILL_FAILOVER_LOST": str(args.failover_lost),
           "DRILL_DST_HOURS": str(args.dst_hours), "DRILL_DST_ALL_ZONES": str(int(args.dst_zones == "all"))}
    started = time.monotonic()
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
               *[f"tests/{DRILLS[name]}" for name in chosen]]
    code = subprocess.call(command, cwd=ROOT, env=env)
    print(f"\n{len(chosen)} drill(s) on the {args.server} server in {time.monotonic() - started:.0f} s, pytest exit code {code}\n")
    for line in figures.read_text().splitlines():
        record = json.loads(line)
        print(record.pop("drill"))
        for key, value in record.items():
            print(f"    {key.replace('_', ' ')}: {value}")
    figures.unlink()
    return code


if __name__ == "__main__":
    sys.exit(main())
