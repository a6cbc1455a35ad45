"""docs/ARCHITECTURE.md, docs/BENCHMARKS.md, docs/MASKING.md and docs/RELIABILITY.md: every
block, in document order (tests/docs/snippets.py).

ARCHITECTURE's layer check runs, as it says, from the repository's top level
(`cwd=repository`; it only reads jobsweb/), and prints the count its text block shows.
BENCHMARKS.md is written by `make bench` (bench/sections.py): its plans are text blocks.
"""

import pytest

from tests.docs.snippets import Document, fence_test

DOCS = [Document(f"docs/{name}.md") for name in ("ARCHITECTURE", "BENCHMARKS", "MASKING", "RELIABILITY")]
BLOCKS = [block for doc in DOCS for block in doc.blocks]
DOCS_MIGRATED = False  # no block of these reads or writes jobsweb's tables


@pytest.mark.parametrize("doc", DOCS, ids=[doc.name for doc in DOCS])
def test_fences(doc):
    fence_test(doc)()


@pytest.mark.parametrize("block", BLOCKS, ids=[str(block) for block in BLOCKS])
def test_block(block, docs):
    docs.run(block)
