"""The audit log: who retried, cancelled, paused or edited what, and when."""

from sqlalchemy import select

from ..core.database import db
from ..core.models import AuditEntry
from .access import viewer


def record(action, target_type, target_id=None, **detail):
    """Add an entry for the viewer to the current transaction (the caller commits). A host's
    viewer is recorded by the identity its `authorize` gave."""
    db.session.add(AuditEntry(user_id=viewer().user_id, user_email=viewer().identity, action=action,
                              target_type=target_type, target_id=target_id, detail=detail))


def entries_for(target_type, target_id, limit=50):
    """The newest entries about one run or definition (index jobsweb_audit_log_target)."""
    return db.session.scalars(
        select(AuditEntry)
        .where(AuditEntry.target_type == target_type, AuditEntry.target_id == target_id)
        .order_by(AuditEntry.id.desc()).limit(limit)).all()
