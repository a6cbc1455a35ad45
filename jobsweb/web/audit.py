"""The audit log: who retried, cancelled, paused or edited what, and when."""

from flask_login import current_user
from sqlalchemy import select

from ..core.database import db
from ..core.models import AuditEntry


def record(action, target_type, target_id=None, **detail):
    """Add an entry for the signed-in user to the current transaction (the caller commits)."""
    db.session.add(AuditEntry(user_id=current_user.id, user_email=current_user.email, action=action,
                              target_type=target_type, target_id=target_id, detail=detail))


def entries_for(target_type, target_id, limit=50):
    """The newest entries about one run or definition (index audit_log_target)."""
    return db.session.scalars(
        select(AuditEntry)
        .where(AuditEntry.target_type == target_type, AuditEntry.target_id == target_id)
        .order_by(AuditEntry.id.desc()).limit(limit)).all()
