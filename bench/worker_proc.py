"""One jobsweb worker process for the benchmarks: `python -m bench.worker_proc URL CONCURRENCY`.

The same Worker that `flask run-jobs` runs, with the CLI's logging (unless --quiet); prints
its own peak RSS (kB, bench/peak_rss.py) and CPU seconds as JSON when it exits.
"""

import argparse
import json
import logging
import resource

from jobsweb import create_app
from jobsweb.commands import setup_logging
from jobsweb.core.database import database_url
from jobsweb.commands import build_worker

from .peak_rss import own_peak_kb


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("concurrency", type=int)
    parser.add_argument("--forever", action="store_true")
    parser.add_argument("--poll-interval", type=float, default=5.0)
    parser.add_argument("--max-runtime", type=float)
    parser.add_argument("--quiet", action="store_true", help="log warnings only (no per-run lines)")
    args = parser.parse_args()
    # A worker evaluates alerts as a duty already; the web app's alert thread is not wanted here.
    app = create_app({"SQLALCHEMY_DATABASE_URI": database_url(args.url), "JOBSWEB_WEB_ALERTS": False,
                      "SECRET_KEY": "0123456789abcdef-test-secret-key-0123456789-bench"})
    with app.app_context():
        setup_logging()
    if args.quiet:
        logging.getLogger().setLevel(logging.WARNING)
    worker = build_worker(app, concurrency=args.concurrency, poll_interval=args.poll_interval,
                    shutdown_timeout=5, max_runtime=args.max_runtime, forever=args.forever)
    worker.run()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    print(json.dumps({"maxrss_kb": own_peak_kb(), "cpu_seconds": usage.ru_utime + usage.ru_stime}), flush=True)


if __name__ == "__main__":
    main()
