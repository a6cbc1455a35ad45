"""The benchmark's worker RSS is the worker's own, not that of the `python -m bench` which started it.

On Linux a child started with subprocess reports, through getrusage's ru_maxrss, at least its
parent's peak (bench/peak_rss.py says why): the stock server's workers, measured second in a
full run, showed the bench process's 147 MB. No database is needed to show it.
"""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# A parent that touches 300 MB, lets it go, then starts a small child that reports both figures.
PARENT = """
import json, resource, subprocess, sys
ballast = bytearray(300 * 1024 * 1024)
ballast[::4096] = b"x" * len(ballast[::4096])
del ballast
child = subprocess.run([sys.executable, "-c", "import json, resource; from bench.peak_rss import own_peak_kb; "
                        "print(json.dumps([own_peak_kb(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss]))"],
                       capture_output=True, text=True, check=True)
print(child.stdout)
"""


def test_a_child_of_a_big_parent_reports_its_own_small_peak_where_getrusage_reports_the_parents():
    done = subprocess.run([sys.executable, "-c", PARENT], cwd=ROOT, capture_output=True, text=True, check=True,
                          timeout=60)
    own_kb, getrusage_kb = json.loads(done.stdout)
    assert own_kb < 60 * 1024  # a bare interpreter that imported one small module
    assert getrusage_kb > 300 * 1024  # the parent's ballast, which the child never touched
