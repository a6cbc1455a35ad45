"""Job type names: a new registration is held to a safe character set; names already in the
database (from before the check) keep working (issue 38, item 6)."""

import pytest

from jobsweb import job
from jobsweb.core.errors import InvalidInput
from jobsweb.engine.jobs import registry


@pytest.mark.parametrize("name", ['report<img src=x onerror=alert(1)>', "send report", 'mail"}', "export/csv",
                                  "rapport_été", "x\u200by", ""])
def test_a_job_type_outside_the_safe_characters_is_refused_naming_it(registry_snapshot, name):
    with pytest.raises(InvalidInput) as refused:
        job(name)(lambda ctx: None)
    assert refused.value.field == "name"
    assert str(refused.value) == (f"name: {name!r} is not a job type name: use ASCII letters, digits and "
                                  "the characters . _ : - only")
    assert registry.get(name) is None


def test_letters_digits_dots_underscores_colons_and_hyphens_register(registry_snapshot):
    job("billing.Export_v2:eu-west-1")(lambda ctx: None)
    assert registry.get("billing.Export_v2:eu-west-1") is not None


def test_a_job_type_name_already_in_the_database_keeps_working(sign_in, runner, sql):
    sql("INSERT INTO job_runs (job_type, payload, status) VALUES ('legacy report', '{}', 'dead')")
    paused = runner.invoke(args=["jobs", "pause-type", "legacy report"])
    assert paused.exit_code == 0, paused.output
    assert sql("SELECT job_type FROM job_paused_types") == [("legacy report",)]
    page = sign_in("viewer").get("/runs?job_type=legacy+report")
    assert page.status_code == 200 and "legacy report" in page.get_data(as_text=True)
