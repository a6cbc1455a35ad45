"""bench/'s imports go one way: no module of the benchmark suite imports one that imports it back.

The same check as docs/ARCHITECTURE.md §1's `layers` block, over bench/ instead of jobsweb/.
"""

import ast
import graphlib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def import_graph(package):
    """Each module of `package` (a folder under the repository's top) and the package's modules it imports.

    Function-level imports count: a circle closed at call time is still a circle to a reader.
    """
    files = {".".join(f.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): f
             for f in (ROOT / package).rglob("*.py")}
    graph = {}
    for module, f in files.items():
        parent = module if f.name == "__init__.py" else module.rpartition(".")[0]
        imported = set()
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.ImportFrom):
                parts = parent.split(".")
                base = ".".join(parts[:len(parts) + 1 - node.level]) if node.level else ""
                target = ".".join(filter(None, [base, node.module]))
                # `from . import soak` imports the module bench.soak; `from .soak import soak` imports bench.soak.
                imported |= {f"{target}.{a.name}" if f"{target}.{a.name}" in files else target for a in node.names}
            elif isinstance(node, ast.Import):
                imported |= {a.name for a in node.names}
        graph[module] = {m for m in imported if m in files and m != module}
    return graph


def circle(graph):
    """One import circle of `graph`, each module followed by one it imports; or None."""
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as e:
        # graphlib lists each module before the ones that import it.
        return e.args[1][::-1]
    return None


def test_the_bench_modules_import_each_other_without_a_circle():
    graph = import_graph("bench")
    assert "bench.__main__" in graph and "bench.soak" in graph
    found = circle(graph)
    assert found is None, "import circle in bench/: " + " imports ".join(found)


def test_nothing_in_bench_imports_its_entry_point():
    # `python -m bench` runs bench/__main__.py as __main__: a module importing bench.__main__ gets a
    # second copy of it, with tables and classes of its own.
    graph = import_graph("bench")
    assert [m for m, imported in graph.items() if "bench.__main__" in imported] == []
