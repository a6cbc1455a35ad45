"""jobsweb's schema: its Alembic migrations, kept apart from any other history in the database.

The revision lives in jobsweb_alembic_version (migrations/env.py), so a team's app whose own
Alembic history sits in alembic_version is never touched; `flask jobs migrate` upgrades
jobsweb's tables whatever else the app migrates, and /healthz compares the two.
"""

from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory

from .package_files import resource

VERSION_TABLE = "jobsweb_alembic_version"


def alembic_config():
    """Alembic's settings for jobsweb's migrations (no ini file: the host's logging stays as it is)."""
    config = Config()
    config.set_main_option("script_location", str(resource("migrations")))
    return config


def upgrade():
    """Create jobsweb's tables or bring them to this version, in the current app's database."""
    command.upgrade(alembic_config(), "head")


def revisions():
    """(heads, every revision) of the migrations this code carries."""
    script = ScriptDirectory.from_config(alembic_config())
    return frozenset(script.get_heads()), frozenset(r.revision for r in script.walk_revisions())
