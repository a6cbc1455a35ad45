"""The `flask` commands jobsweb adds to an app: `run-jobs` and the `jobs` group (schema,
enqueue, schedules, queues, retention, users); the standalone app also gets `dev` and `users`."""

# The groups import their commands' modules when a command of theirs is looked up (groups.py).
from .groups import jobs, setup_logging, users
from .worker_commands import build_worker, dev_command, run_jobs

__all__ = ["init_app", "init_standalone", "build_worker", "setup_logging"]

jobs.add_command(users)


def init_app(app):
    """Add jobsweb's commands to the app's `flask`: `run-jobs` and the `jobs` group (`jobs users`
    inside it, so that a host's own `flask users` is left alone)."""
    app.cli.add_command(run_jobs)
    app.cli.add_command(jobs)


def init_standalone(app):
    """The standalone app's own commands: `flask dev`, and `flask users` as the docs have it."""
    app.cli.add_command(users)
    app.cli.add_command(dev_command)
