"""What jobsweb's schema holds at its head revision, and what a database lacks of it.

A dump of jobsweb's tables alone (DEPLOY.md, "Backing up") carries none of its functions, and
the trigger that names one cannot be restored without them: the revision says head, and every
claim fails with UndefinedFunction. `flask jobs migrate` recreates missing functions and triggers
from the SQL of the migration that last defined each (a migration is a frozen snapshot, read,
not copied) and names what it cannot recreate (a table, an index: the restore must bring them);
the worker, at start, and /healthz refuse an incomplete schema with one line naming what is
missing; a running worker looks again as often as it heartbeats (ops/schema_watch.py). A trigger
that is there but disabled (`ALTER TABLE ... DISABLE TRIGGER`, as bulk loads do) breaks the
engine as much as a missing one: every chain step and batch callback waits for ever. It is
named too, and `flask jobs migrate` enables it again; what a missing or disabled trigger left
waiting, core/workflow_repair.py then moves on. tests/test_migrations.py compares these lists
with pg_catalog after a fresh migrate, on both servers: a migration that adds, drops or replaces
one of these says so here.
"""

import re
from typing import NamedTuple

from .database import db, execute
from .schema import MIGRATION_LOCK, alembic, alembic_config

HEAD = "0034_worker_stop"  # the revision these lists describe

TABLES = (
    "job_attempts", "job_batches", "job_definitions", "job_duration_totals", "job_effects", "job_metrics_state",
    "job_paused_types", "job_queues", "job_run_deps", "job_runs", "job_type_metrics", "job_type_metrics_state",
    "job_workers", "jobsweb_alembic_version", "jobsweb_alert_deliveries", "jobsweb_alert_incident_runs",
    "jobsweb_alert_incidents", "jobsweb_audit_log", "jobsweb_deploy_marks", "jobsweb_sign_in_failures",
    "jobsweb_users",
)
# The indexes made by CREATE INDEX, each for a query (its migration says which); those of primary
# keys and unique constraints come and go with their tables' constraints.
INDEXES = (
    "job_attempts_finished_outcome", "job_attempts_worker", "job_batches_open", "job_definitions_due",
    "job_definitions_ping_token", "job_run_deps_after", "job_runs_after_run", "job_runs_batch",
    "job_runs_batch_callbacks", "job_runs_claimable", "job_runs_created_at", "job_runs_dead_finished",
    "job_runs_definition", "job_runs_definition_active", "job_runs_definition_slot", "job_runs_errored", "job_runs_idempotency_key",
    "job_runs_job_type_id", "job_runs_payload", "job_runs_prunable", "job_runs_queue_claimable", "job_runs_running",
    "job_runs_status_id", "job_runs_unique_key", "jobsweb_alert_deliveries_due", "jobsweb_alert_deliveries_incident",
    "jobsweb_alert_incident_runs_incident", "jobsweb_alert_incidents_definition",
    "jobsweb_alert_incidents_open_definition", "jobsweb_alert_incidents_open_job_type",
    "jobsweb_alert_incidents_open_no_worker", "jobsweb_alert_incidents_opened", "jobsweb_audit_log_action",
    "jobsweb_audit_log_target", "jobsweb_audit_log_user", "jobsweb_deploy_marks_at", "jobsweb_sign_in_failures_address",
    "jobsweb_sign_in_failures_at", "jobsweb_sign_in_failures_email", "jobsweb_users_email",
)
# Each function (as regprocedure writes it) and trigger: (the migration whose SQL creates it as
# it is at HEAD, the constant of that migration holding that SQL).
FUNCTIONS = {
    "jobsweb_claim_runs_in_order(text,double precision,text[],integer,integer,text[])": ("0032_unbegun_claims", "UPGRADE"),
    "jobsweb_claim_runs(text,double precision,text[],integer,integer,text[])": ("0025_claim_order", "UPGRADE"),
    "jobsweb_count_down(bigint[],boolean)": ("0024_seams", "UPGRADE_BEFORE"),
    "jobsweb_batch_ended(bigint,integer,integer)": ("0024_seams", "UPGRADE_BEFORE"),
    "jobsweb_cancel_below(bigint,text)": ("0024_seams", "UPGRADE_BEFORE"),
    "jobsweb_revive_below(bigint,text)": ("0026_retry_seams", "UPGRADE"),
    "jobsweb_workflow_step()": ("0026_retry_seams", "UPGRADE"),
}
TRIGGERS = {"job_runs_workflow ON job_runs": ("0024_seams", "UPGRADE_AFTER")}

# One round trip of catalog look-ups (about a millisecond: /healthz runs it at every check).
# to_regclass and to_regprocedure follow the search_path, as every statement of jobsweb does.
MISSING = """
SELECT 'table ' || name FROM unnest(CAST(%(tables)s AS text[])) AS name WHERE to_regclass(name) IS NULL
UNION ALL
SELECT 'index ' || name FROM unnest(CAST(%(indexes)s AS text[])) AS name WHERE to_regclass(name) IS NULL
UNION ALL
SELECT 'function ' || name FROM unnest(CAST(%(functions)s AS text[])) AS name WHERE to_regprocedure(name) IS NULL
UNION ALL
SELECT 'trigger ' || name FROM unnest(CAST(%(triggers)s AS text[])) AS name
WHERE NOT EXISTS (SELECT 1 FROM pg_trigger t WHERE t.tgname = split_part(name, ' ON ', 1)
                  AND t.tgrelid = to_regclass(split_part(name, ' ON ', 2)))
UNION ALL
-- There but not firing: tgenabled 'D' (DISABLE TRIGGER, or DISABLE TRIGGER ALL) or 'R' (ENABLE
-- REPLICA TRIGGER: it fires only in sessions of session_replication_role = replica, and no
-- session of jobsweb is one). 'O' and 'A' fire.
SELECT 'disabled trigger ' || name FROM unnest(CAST(%(triggers)s AS text[])) AS name
WHERE EXISTS (SELECT 1 FROM pg_trigger t WHERE t.tgname = split_part(name, ' ON ', 1)
              AND t.tgrelid = to_regclass(split_part(name, ' ON ', 2)) AND t.tgenabled IN ('D', 'R'))
"""
PARAMS = {"tables": list(TABLES), "indexes": list(INDEXES), "functions": list(FUNCTIONS), "triggers": list(TRIGGERS)}
# The worker's check at start, in one round trip (the revision and then MISSING took three): what
# is missing, read only where the schema says it is at HEAD. An older one waits for `flask jobs
# migrate`; a newer one is a newer release's, which may have dropped what this one lists.
MISSING_AT_HEAD = f"""
SELECT lacking FROM ({MISSING}) AS m (lacking)
WHERE (SELECT version_num FROM jobsweb_alembic_version) = %(head)s
"""


def missing():
    """What the current app's database lacks of HEAD's tables, indexes, functions and triggers,
    each as "kind name", and its triggers that do not fire, as "disabled trigger name" ([] when
    nothing). In db.session's transaction (the caller ends it)."""
    return list(execute(MISSING, PARAMS).scalars())


def missing_at_head():
    """missing() if the database's schema is at HEAD, else []; UndefinedTable where nothing was
    migrated (no jobsweb_alembic_version). In db.session's transaction (the caller ends it)."""
    return list(execute(MISSING_AT_HEAD, {**PARAMS, "head": HEAD}).scalars())


DISABLED = "disabled "  # how missing() names a trigger that is there but does not fire


def describe(lacking):
    """The one line that names what is missing or disabled, and what to do."""
    gone = [what for what in lacking if not what.startswith(DISABLED)]
    off = [what.removeprefix(DISABLED) for what in lacking if what.startswith(DISABLED)]
    wrong = ", ".join(([f"missing {', '.join(gone)}"] if gone else []) + [f"{what} disabled" for what in off])
    if not off:
        does = "it recreates functions and triggers; tables and indexes come back with a restore of jobsweb's tables"
    elif not gone:
        does = "it enables the trigger again and moves on the runs it left waiting"
    else:
        does = ("it recreates functions and triggers, enables a disabled one and moves on the runs they left "
                "waiting; tables and indexes come back with a restore of jobsweb's tables")
    return f"jobsweb's schema at {HEAD} is incomplete, {wrong}: run `flask jobs migrate` ({does})"


class Recreated(NamedTuple):
    """What recreate() did: objects recreated and triggers enabled (each "kind name"), and what is
    still missing (a table, an index)."""

    made: list
    enabled: list
    still: list

    def trigger_back(self):
        """Whether a trigger was recreated or enabled: what it would have done meanwhile was not."""
        return bool(self.enabled) or any(what.startswith("trigger ") for what in self.made)


def recreate():
    """Recreate the missing functions, then the missing triggers (which name them), from their
    migrations' SQL, and enable the disabled triggers, under the migrations' lock (`flask jobs
    migrate` may run in several processes at once), and commit. Returns a Recreated."""
    execute("SELECT pg_advisory_xact_lock(%(lock)s)", {"lock": MIGRATION_LOCK})
    lacking = missing()
    script = alembic("alembic.script").ScriptDirectory.from_config(alembic_config())
    made = []
    for what, sources in (("function", FUNCTIONS), ("trigger", TRIGGERS)):
        for name, (revision, constant) in sources.items():
            if f"{what} {name}" in lacking:
                sql = getattr(script.get_revision(revision).module, constant)
                # Without parameters, through the driver: a body's `%ROWTYPE` is not a placeholder.
                with db.session.connection().connection.cursor() as cursor:
                    cursor.execute(creation(what, name, sql))
                made.append(f"{what} {name}")
    enabled = []
    for name in TRIGGERS:
        if f"{DISABLED}trigger {name}" in lacking:
            trigger, table = name.split(" ON ")
            execute(f"ALTER TABLE {table} ENABLE TRIGGER {trigger}")  # 'O': fires in every session of ours
            enabled.append(f"trigger {name}")
    still = missing()
    db.session.commit()
    return Recreated(made, enabled, still)


def creation(what, name, sql):
    """The CREATE statement of one function or trigger in a migration's SQL (a function's as
    CREATE OR REPLACE: a concurrent migrate may have made it meanwhile)."""
    if what == "function":
        pattern = rf"CREATE (?:OR REPLACE )?FUNCTION {re.escape(name.split('(')[0])}\(.*?\bAS (\$\w*\$).*?\1;"
    else:
        pattern = rf"CREATE TRIGGER {re.escape(name.split(' ')[0])}\b.*?;"
    found = re.search(pattern, sql, re.DOTALL)
    if found is None:
        raise LookupError(f"no CREATE of {what} {name} in its migration's SQL")
    return re.sub(r"^CREATE (OR REPLACE )?FUNCTION", "CREATE OR REPLACE FUNCTION", found.group(0))
