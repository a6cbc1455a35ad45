"""The folders that travel with the code: templates, static files and migrations.

The repository keeps them at its top level, beside jobsweb/; the wheel carries them inside the
package (pyproject.toml maps one to the other), so either place is looked at.
"""

from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent


def resource(name):
    """The folder `name` (templates, static, migrations): inside the package when installed from
    the wheel, at the repository's top level in a checkout."""
    inside = PACKAGE / name
    return inside if inside.is_dir() else PACKAGE.parent / name
