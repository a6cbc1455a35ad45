"""jobsweb.Conflict: what cancel() and retry() raise once a conflict outlasted their patience
(docs/REFERENCE.md), importable from the package as the other errors a caller catches are."""

import jobsweb
from jobsweb.core import conflicts


def test_conflict_is_exported_beside_the_other_errors_callers_catch():
    from jobsweb import Conflict

    assert Conflict is conflicts.Conflict and "Conflict" in jobsweb.__all__ and "Conflict" in dir(jobsweb)
    assert not issubclass(Conflict, jobsweb.InvalidInput)  # busy, not bad input: try again later
