"""The failover drill at full size (issue 51, item 7), its figures printed.

    python drills/failover.py                       # 5,000 runs, 100 finishes lost at the failover
    python drills/failover.py --runs 20000 --lost 0 # streaming not paused: what the standby had

On each server kind (the embedded PostgreSQL 18 and Debian's 15, each with its own binaries), a
primary and a streaming standby made from it by pg_basebackup; two workers drain the runs and
gunicorn serves the admin screen while an operator reads it, all through one multi-host
DATABASE_URL (target_session_attrs=read-write); the primary dies and the standby is promoted.
With --lost N the standby stops receiving first and the primary acknowledges N more finishes,
which the failover then loses, as an asynchronous standby does. Nothing is restarted.

It runs tests/test_failover.py's drill, whose short form (240 runs, 10 lost) runs in `make test`,
with these sizes, as drills/run.py runs the other drills. The figures: finishes and effect keys
the old primary acknowledged and the new one never got, runs lost and ended twice, effects sent
twice outside the database, runs succeeded without their handler's commit, seconds from the
promotion to the first claim and to every run done, each worker's "database unavailable" and
warning lines, and the admin screen's 503s.
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


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5_000)
    parser.add_argument("--lost", type=int, default=100,
                        help="finishes the old primary acknowledges after streaming pauses (0: no pause)")
    args = parser.parse_args()
    figures = Path(tempfile.mkstemp(prefix="jobsweb-failover-", suffix=".jsonl")[1])
    env = {**os.environ, "DRILL_FIGURES": str(figures), "DRILL_FAILOVER_RUNS": str(args.runs),
           "DRILL_FAILOVER_LOST": str(args.lost)}
    started = time.monotonic()
    code = subprocess.call([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_failover.py",
                            "-k", "failover_reaches_every_process"], cwd=ROOT, env=env)
    print(f"\nthe failover drill on both servers in {time.monotonic() - started:.0f} s, pytest exit code {code}\n")
    for line in figures.read_text().splitlines():
        record = json.loads(line)
        print(record.pop("drill"))
        for key, value in record.items():
            print(f"    {key.replace('_', ' ')}: {value}")
    figures.unlink()
    return code


if __name__ == "__main__":
    sys.exit(main())
