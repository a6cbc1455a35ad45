"""jobsweb/schema.sql is the schema a fresh migrate makes, on each server, and names what
jobsweb.core.schema_objects lists."""

import difflib
import re

import pytest

from jobsweb.core import schema_objects
from tests.schema_dump import SCHEMA_FILE, migrated_dump, pg_dump_for

# pg_dump's header of each object: "-- Name: <name>; Type: <kind>; Schema: public; Owner: -".
OBJECT = re.compile(r"^-- Name: (.+); Type: ([A-Z ]+); Schema: ", re.MULTILINE)


def objects_in_file(kind):
    return {name for name, found in OBJECT.findall(SCHEMA_FILE.read_text()) if found == kind}


def test_schema_sql_is_what_a_fresh_migrate_makes(postgres_server):
    admin, server = postgres_server
    made, held = migrated_dump(admin, pg_dump_for(server)), SCHEMA_FILE.read_text()
    if made != held:
        diff = "".join(difflib.unified_diff(held.splitlines(keepends=True), made.splitlines(keepends=True),
                                            "jobsweb/schema.sql", "a fresh migrate"))
        pytest.fail(f"jobsweb/schema.sql is not the schema the migrations make: run `make schema` and "
                    f"commit the file with the migration\n{diff}", pytrace=False)


def test_schema_sql_holds_every_table_index_function_and_trigger_that_schema_objects_lists():
    # schema_objects writes a function as regprocedure does (no space after commas), pg_dump with one.
    assert {name.replace(", ", ",") for name in objects_in_file("FUNCTION")} == set(schema_objects.FUNCTIONS)
    # pg_dump names a trigger "<table> <trigger>".
    assert {"{1} ON {0}".format(*name.split(" ")) for name in objects_in_file("TRIGGER")} == set(schema_objects.TRIGGERS)
    assert objects_in_file("TABLE") == set(schema_objects.TABLES)
    assert objects_in_file("INDEX") == set(schema_objects.INDEXES)
    assert f"revision {schema_objects.HEAD}:" in SCHEMA_FILE.read_text().splitlines()[0]
