"""The audit log: who retried, cancelled, paused or edited what, and when."""

from sqlalchemy import select, text

from ..core.database import db
from ..core.models import AuditEntry
from .access import viewer


def record(action, target_type, target_id=None, **detail):
    """Add an entry for the viewer to the current transaction (the caller commits). A host's
    viewer is recorded by the identity its `authorize` gave."""
    record_for(viewer().user_id, viewer().identity, action, target_type, target_id, **detail)


def record_for(user_id, identity, action, target_type, target_id=None, **detail):
    """Add an entry for someone who is not (yet) the viewer: a person signing in, with the
    email they typed (the caller commits)."""
    db.session.add(AuditEntry(user_id=user_id, user_email=identity, action=action,
                              target_type=target_type, target_id=target_id, detail=detail))


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
