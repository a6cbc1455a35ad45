"""docs/WORKFLOWS.md: every block, in document order (tests/docs/snippets.py), and what its
examples say they did: a run waiting for another, a batch with its callbacks, a chain.

Its blocks enqueue runs of job types they register themselves ("stand-ins for your handlers");
`db` is the reader's Flask-SQLAlchemy, here the scratch host app's.
"""

import pytest

from jobsweb import get_run
from tests.docs.snippets import Document, fence_test

DOC = Document("docs/WORKFLOWS.md")
test_fences = fence_test(DOC)


@pytest.fixture(scope="module")
def workflows(docs):
    from tests.docs.scratch_host import db

    docs.namespace["db"] = db
    return docs


@pytest.mark.parametrize("block", DOC.blocks, ids=DOC.ids)
def test_block(block, workflows):
    workflows.run(block)
    seen = workflows.namespace
    with workflows.app.app_context():
        if block.id == "overview":
            assert (get_run(seen["a"]).status, get_run(seen["b"]).status) == ("queued", "waiting")
            state = seen["get_batch"](seen["export"].id)
            assert (state.members, state.pending, sorted(seen["export"].callbacks)) == (100, 100, ["on_finish", "on_success"])
            first = seen["first"]
            assert first == first.ids[0] and len(first.ids) == 3 and first.last == first.ids[-1]
            assert [get_run(i).status for i in first.ids] == ["queued", "waiting", "waiting"]
        if block.id == "batch":
            state = seen["get_batch"](seen["export"].id)
            assert (state.members, state.pending, state.payload) == (100_000, 100_000, {"export": 7})
            assert [get_run(seen["export"].callbacks[c]).status for c in ("on_finish", "on_success")] == ["waiting"] * 2
