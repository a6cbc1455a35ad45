"""Worker processes as the database sees them (job_workers): alive, gone or stopped.

A worker heartbeats every third of its lease, so one silent for GONE_AFTER_LEASES leases is
gone (killed, frozen, its host lost), never merely slow: by then its runs' leases have expired
and other workers retry them. The workers page and /metrics both judge by this rule.
"""

GONE_AFTER_LEASES = 2


def gone_after(config):
    """Seconds without a heartbeat after which a worker that did not stop counts as gone."""
    return GONE_AFTER_LEASES * config["JOBSWEB_LEASE_SECONDS"]


def state(stopped_at, heartbeat_age, gone_after_seconds):
    """'stopped' (exited cleanly), 'gone' (stopped heartbeating) or 'alive'."""
    if stopped_at is not None:
        return "stopped"
    return "gone" if heartbeat_age > gone_after_seconds else "alive"
