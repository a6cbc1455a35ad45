"""The audit log: who retried, cancelled, paused or edited what, and when, on the admin screen
or with a `flask` command."""

import copy
import getpass

from flask import current_app
from sqlalchemy import select, text

from ..core.database import db
from ..core.models import AuditEntry
from ..ops.notify import redact
from .access import viewer
from .rendering import mask_secrets

# The settings of a definition an edit can change, as an "edit" entry lists them.
DEFINITION_FIELDS = ("job_type", "external", "schedule", "timezone", "payload", "max_attempts", "overlap_policy",
                     "misfire_policy", "grace_seconds", "timeout_seconds", "lease_seconds", "backoff_base",
                     "backoff_cap", "alert_after_failures", "alert_webhook_url", "alert_email_to", "queue",
                     "priority", "max_duration_seconds")


def record(action, target_type, target_id=None, **detail):
    """Add an entry for the viewer to the current transaction (the caller commits). A host's
    viewer is recorded by the identity its `authorize` gave."""
    record_for(viewer().user_id, viewer().identity, action, target_type, target_id, **detail)


def record_for(user_id, identity, action, target_type, target_id=None, **detail):
    """Add an entry for someone who is not (yet) the viewer: a person signing in, with the
    email they typed (the caller commits)."""
    db.session.add(AuditEntry(user_id=user_id, user_email=identity, action=action,
                              target_type=target_type, target_id=target_id, detail=detail))


def command_identity():
    """Who runs a `flask` command: cli:<the operating-system user>."""
    try:
        user = getpass.getuser()
    except (OSError, KeyError):  # no USER and no passwd entry (a container's numeric user)
        user = "unknown"
    return f"cli:{user}"


def record_command(action, target_type, target_id=None, **detail):
    """Add an entry for a `flask` command, by the operating-system user who ran it (the caller
    commits): a change from a shell is as much an admin action as one from a page."""
    record_for(None, command_identity(), action, target_type, target_id, **detail)


def settings_of(definition):
    """What an edit of `definition` may change, before it changes (None for a new definition)."""
    if definition is None:
        return None
    return {field: copy.deepcopy(getattr(definition, field)) for field in DEFINITION_FIELDS}


def changes(before, definition):
    """{field: [old, new]} for each setting that differs from `before` (settings_of), payload
    secrets masked and webhook URLs without their secret path, as every page shows them."""
    words = current_app.config["JOBSWEB_MASK_KEYS"]

    def shown(field, value):
        if field == "payload":
            return mask_secrets(value, words)
        if field == "alert_webhook_url" and value:
            return redact(value)
        return value

    after = settings_of(definition)
    return {field: [shown(field, before[field]), shown(field, after[field])]
            for field in DEFINITION_FIELDS if before[field] != after[field]}


def entries_for(target_type, target_id, limit=50):
    """The newest entries about one run or definition (index jobsweb_audit_log_target)."""
    return db.session.scalars(
        select(AuditEntry)
        .where(AuditEntry.target_type == target_type, AuditEntry.target_id == target_id)
        .order_by(AuditEntry.id.desc()).limit(limit)).all()


PAGE_SIZE = 50

# The distinct values of one column, each found by one index probe (a loose index scan): the
# log grows with every action, and DISTINCT would read all of it. Indexes
# jobsweb_audit_log_action (0014) and jobsweb_audit_log_target (0003).
DISTINCT = """
WITH RECURSIVE v AS (
    SELECT min({column}) AS value FROM jobsweb_audit_log
    UNION ALL
    SELECT (SELECT min({column}) FROM jobsweb_audit_log WHERE {column} > v.value) FROM v WHERE v.value IS NOT NULL
)
SELECT value FROM v WHERE value IS NOT NULL
"""


def distinct(column):
    """Every action or target_type ever recorded, sorted (for the /audit filters)."""
    assert column in ("action", "target_type")
    return db.session.scalars(text(DISTINCT.format(column=column))).all()


def page(user="", action="", target_type="", target_id=None, before=None, size=PAGE_SIZE):
    """One keyset page of entries, newest first, and the id to pass as `before` next (or None).

    Each filter rides an index on (its column, id): jobsweb_audit_log_user, _action, _target."""
    stmt = select(AuditEntry).order_by(AuditEntry.id.desc()).limit(size + 1)
    if user:
        stmt = stmt.where(AuditEntry.user_email == user)
    if action:
        stmt = stmt.where(AuditEntry.action == action)
    if target_type:
        stmt = stmt.where(AuditEntry.target_type == target_type)
    if target_id is not None:
        stmt = stmt.where(AuditEntry.target_id == target_id)
    if before is not None:
        stmt = stmt.where(AuditEntry.id < before)
    rows = db.session.scalars(stmt).all()
    return rows[:size], (rows[size - 1].id if len(rows) > size else None)
