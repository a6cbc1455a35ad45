"""ORM mappings of the jobsweb tables, for admin reads and edits.

The schema itself is defined by the migrations; the worker's hot path does not use these
classes but the named SQL in engine/statements.py, where the run statuses are listed too.
"""

from datetime import datetime

from sqlalchemy import BigInteger, DateTime, Double, ForeignKey, Text, func
from sqlalchemy.dialects.postgresql import ARRAY, JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

TIMESTAMPTZ = DateTime(timezone=True)  # every jobsweb time is set by the database clock


class Model(DeclarativeBase):
    """jobsweb's own declarative base: its tables never join a host app's metadata."""



class JobDefinition(Model):
    __tablename__ = "job_definitions"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    name: Mapped[str] = mapped_column(Text, unique=True)
    job_type: Mapped[str] = mapped_column(Text)
    payload: Mapped[dict] = mapped_column(JSONB, server_default="{}")
    schedule: Mapped[str | None] = mapped_column(Text)
    timezone: Mapped[str] = mapped_column(Text, server_default="UTC")
    max_attempts: Mapped[int] = mapped_column(server_default="5")
    enabled: Mapped[bool] = mapped_column(server_default="true")
    backoff_base: Mapped[float | None] = mapped_column(Double)  # seconds
    backoff_cap: Mapped[float | None] = mapped_column(Double)  # seconds
    timeout_seconds: Mapped[float | None] = mapped_column(Double)
    lease_seconds: Mapped[float | None] = mapped_column(Double)
    misfire_policy: Mapped[str] = mapped_column(Text, server_default="latest")
    overlap_policy: Mapped[str] = mapped_column(Text, server_default="skip")
    grace_seconds: Mapped[int] = mapped_column(server_default="300")
    next_run_at: Mapped[datetime | None] = mapped_column(TIMESTAMPTZ)
    last_run_at: Mapped[datetime | None] = mapped_column(TIMESTAMPTZ)
    last_status: Mapped[str | None] = mapped_column(Text)
    last_duration_ms: Mapped[int | None] = mapped_column(BigInteger)
    failure_count: Mapped[int] = mapped_column(server_default="0")
    missed_count: Mapped[int] = mapped_column(BigInteger, server_default="0")
    # Alerts: dead runs in a row that open a 'failing' incident; own channels (NULL: defaults).
    alert_after_failures: Mapped[int] = mapped_column(server_default="2")
    alert_webhook_url: Mapped[str | None] = mapped_column(Text)
    alert_email_to: Mapped[str | None] = mapped_column(Text)  # comma-separated
    # 'admin', 'code' (declared with @job(schedule=...), written by `flask jobs sync`) or
    # 'code-removed' (its declaration disappeared: disabled, kept); see migration 0011.
    source: Mapped[str] = mapped_column(Text, server_default="admin")
    queue: Mapped[str] = mapped_column(Text, server_default="default")
    priority: Mapped[int] = mapped_column(server_default="0")  # smaller runs first
    # Watched, never run by jobsweb: its slots are reported by `flask jobs exec` or pings.
    external: Mapped[bool] = mapped_column(server_default="false")
    ping_token: Mapped[str | None] = mapped_column(Text)  # the secret part of its ping URL
    max_duration_seconds: Mapped[int | None]  # longer opens a 'slow' incident
    created_at: Mapped[datetime] = mapped_column(TIMESTAMPTZ, server_default=func.now())
    updated_at: Mapped[datetime] = mapped_column(TIMESTAMPTZ, server_default=func.now())


class JobRun(Model):
    __tablename__ = "job_runs"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    definition_id: Mapped[int | None] = mapped_column(BigInteger, ForeignKey("job_definitions.id"))
    job_type: Mapped[str] = mapped_column(Text)
    payload: Mapped[dict] = mapped_column(JSONB, server_default="{}")
    run_at: Mapped[datetime] = mapped_column(TIMESTAMPTZ, server_default=func.now())
    status: Mapped[str] = mapped_column(Text, server_default="queued")
    attempts: Mapped[int] = mapped_column(server_default="0")
    max_attempts: Mapped[int] = mapped_column(server_default="5")
    locked_by: Mapped[str | None] = mapped_column(Text)
    locked_until: Mapped[datetime | None] = mapped_column(TIMESTAMPTZ)
    started_at: Mapped[datetime | None] = mapped_column(TIMESTAMPTZ)
    finished_at: Mapped[datetime | None] = mapped_column(TIMESTAMPTZ)
    last_error: Mapped[str | None] = mapped_column(Text)
    error_type: Mapped[str | None] = mapped_column(Text)
    last_stack: Mapped[str | None] = mapped_column(Text)
    idempotency_key: Mapped[str | None] = mapped_column(Text)
    result: Mapped[dict | None] = mapped_column(JSONB)
    scheduled_for: Mapped[datetime | None] = mapped_column(TIMESTAMPTZ)
    reason: Mapped[str | None] = mapped_column(Text)
    after_run_id: Mapped[int | None] = mapped_column(BigInteger, ForeignKey("job_runs.id"))
    timeout_seconds: Mapped[float | None] = mapped_column(Double)
    lease_seconds: Mapped[float | None] = mapped_column(Double)
    backoff_base: Mapped[float | None] = mapped_column(Double)
    backoff_cap: Mapped[float | None] = mapped_column(Double)
    cancel_requested_at: Mapped[datetime | None] = mapped_column(TIMESTAMPTZ)
    queue: Mapped[str] = mapped_column(Text, server_default="default")
    priority: Mapped[int] = mapped_column(server_default="0")  # smaller runs first
    unique_key: Mapped[str | None] = mapped_column(Text)  # one unfinished run per key
    deleted_definition: Mapped[str | None] = mapped_column(Text)  # its definition's name, once deleted
    progress: Mapped[float | None] = mapped_column(Double)  # 0.0 to 1.0, from ctx.progress()
    progress_note: Mapped[str | None] = mapped_column(Text)
    progress_at: Mapped[datetime | None] = mapped_column(TIMESTAMPTZ)
    progress_data: Mapped[dict | None] = mapped_column(JSONB)  # ctx.progress(data=...): a small JSON object
    trace_context: Mapped[str | None] = mapped_column(Text)  # the enqueuer's W3C traceparent (integrations/otel.py)
    batch_id: Mapped[int | None] = mapped_column(BigInteger)  # a member of this batch, or its callback
    batch_callback: Mapped[str | None] = mapped_column(Text)  # 'on_finish' / 'on_success': a callback run
    waiting_for: Mapped[int | None]  # runs of after= not yet ended; None without after=
    run_after_failure: Mapped[bool] = mapped_column(server_default="false")
    awaited: Mapped[bool] = mapped_column(server_default="false")  # some run waits for this one
    created_at: Mapped[datetime] = mapped_column(TIMESTAMPTZ, server_default=func.now())
    updated_at: Mapped[datetime] = mapped_column(TIMESTAMPTZ, server_default=func.now())


class JobAttempt(Model):
    __tablename__ = "job_attempts"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    run_id: Mapped[int] = mapped_column(BigInteger, ForeignKey("job_runs.id", ondelete="CASCADE"))
    attempt: Mapped[int]
    worker: Mapped[str | None] = mapped_column(Text)
    started_at: Mapped[datetime | None] = mapped_column(TIMESTAMPTZ)
    finished_at: Mapped[datetime] = mapped_column(TIMESTAMPTZ, server_default=func.now())
    outcome: Mapped[str] = mapped_column(Text)
    error_type: Mapped[str | None] = mapped_column(Text)
    error: Mapped[str | None] = mapped_column(Text)
    stack: Mapped[str | None] = mapped_column(Text)
    output: Mapped[str | None] = mapped_column(Text)  # the tail of what the attempt printed or logged


class JobWorker(Model):
    __tablename__ = "job_workers"

    id: Mapped[str] = mapped_column(Text, primary_key=True)
    host: Mapped[str] = mapped_column(Text)
    pid: Mapped[int]
    started_at: Mapped[datetime] = mapped_column(TIMESTAMPTZ, server_default=func.now())
    last_seen_at: Mapped[datetime] = mapped_column(TIMESTAMPTZ, server_default=func.now())
    runs_done: Mapped[int] = mapped_column(BigInteger, server_default="0")
    stopped_at: Mapped[datetime | None] = mapped_column(TIMESTAMPTZ)
    job_types: Mapped[list[str] | None] = mapped_column(ARRAY(Text))  # None: a worker from before 0008
    queues: Mapped[list[str] | None] = mapped_column(ARRAY(Text))  # None: every queue
    quiet_at: Mapped[datetime | None] = mapped_column(TIMESTAMPTZ)  # quieted: finishes what it holds, claims nothing
    quiet_by: Mapped[str | None] = mapped_column(Text)
    concurrency: Mapped[int | None]  # None: a worker from before 0034
    stop_requested_at: Mapped[datetime | None] = mapped_column(TIMESTAMPTZ)  # asked to stop: it exits as on SIGTERM
    stop_requested_by: Mapped[str | None] = mapped_column(Text)


ROLES = ("viewer", "operator", "admin")  # each may do what the ones before it may


class User(Model):
    __tablename__ = "jobsweb_users"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    email: Mapped[str] = mapped_column(Text)
    password_hash: Mapped[str] = mapped_column(Text)
    role: Mapped[str] = mapped_column(Text, server_default="viewer")
    created_at: Mapped[datetime] = mapped_column(TIMESTAMPTZ, server_default=func.now())
    last_sign_in_at: Mapped[datetime | None] = mapped_column(TIMESTAMPTZ)
    active: Mapped[bool] = mapped_column(server_default="true")
    # Sessions carry the version they started with; adding one ends them all (migration 0012).
    session_version: Mapped[int] = mapped_column(server_default="1")

    def can(self, role):
        """Whether this user has `role` or a higher one."""
        return ROLES.index(self.role) >= ROLES.index(role)


class AuditEntry(Model):
    __tablename__ = "jobsweb_audit_log"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    at: Mapped[datetime] = mapped_column(TIMESTAMPTZ, server_default=func.now())
    user_id: Mapped[int | None] = mapped_column(BigInteger, ForeignKey("jobsweb_users.id", ondelete="SET NULL"))
    user_email: Mapped[str] = mapped_column(Text)
    action: Mapped[str] = mapped_column(Text)
    target_type: Mapped[str] = mapped_column(Text)
    target_id: Mapped[int | None] = mapped_column(BigInteger)
    detail: Mapped[dict] = mapped_column(JSONB, server_default="{}")


class AlertIncident(Model):
    __tablename__ = "jobsweb_alert_incidents"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    kind: Mapped[str] = mapped_column(Text)
    definition_id: Mapped[int | None] = mapped_column(BigInteger, ForeignKey("job_definitions.id"))
    job_type: Mapped[str | None] = mapped_column(Text)
    subject: Mapped[str] = mapped_column(Text)
    summary: Mapped[str] = mapped_column(Text)
    since: Mapped[datetime] = mapped_column(TIMESTAMPTZ)
    last_failure_at: Mapped[datetime | None] = mapped_column(TIMESTAMPTZ)
    run_id: Mapped[int | None] = mapped_column(BigInteger)
    run_count: Mapped[int] = mapped_column(server_default="0")
    opened_at: Mapped[datetime] = mapped_column(TIMESTAMPTZ, server_default=func.now())
    resolved_at: Mapped[datetime | None] = mapped_column(TIMESTAMPTZ)
    resolution: Mapped[str | None] = mapped_column(Text)


class AlertDelivery(Model):
    __tablename__ = "jobsweb_alert_deliveries"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    incident_id: Mapped[int | None] = mapped_column(BigInteger, ForeignKey("jobsweb_alert_incidents.id"))
    event: Mapped[str] = mapped_column(Text)
    channel: Mapped[str] = mapped_column(Text)
    target: Mapped[str] = mapped_column(Text)
    subject: Mapped[str] = mapped_column(Text)
    body: Mapped[str] = mapped_column(Text)
    data: Mapped[dict] = mapped_column(JSONB, server_default="{}")
    status: Mapped[str] = mapped_column(Text, server_default="pending")
    attempts: Mapped[int] = mapped_column(server_default="0")
    next_attempt_at: Mapped[datetime] = mapped_column(TIMESTAMPTZ, server_default=func.now())
    last_error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(TIMESTAMPTZ, server_default=func.now())
    sent_at: Mapped[datetime | None] = mapped_column(TIMESTAMPTZ)
