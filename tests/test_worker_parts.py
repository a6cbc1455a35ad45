"""The worker is composed of parts that each own their state: read from the source, no database.

`Worker` (the loop) holds its parts (HeldRuns, Claimer, Trips, Leases, Stop, Outages) and calls
their methods; a part reads and writes only its own attributes. Mixins broke that: `Stopping`,
`OutageWaits`, `TripKeeper` and `LeaseHolder` each read fields the others set, and two clocks for
one stop deadline hid between them (issue 50).
"""

import ast
from pathlib import Path

import jobsweb.engine.worker.loop

WORKER = Path(jobsweb.engine.worker.loop.__file__)
PART_MODULES = ["loop", "held_runs", "claimer", "round_trips", "leases", "stop", "outages"]


def classes():
    """{class name: ClassDef} of the worker's modules."""
    found = {}
    for name in PART_MODULES:
        tree = ast.parse((WORKER.parent / f"{name}.py").read_text())
        found.update({node.name: node for node in tree.body if isinstance(node, ast.ClassDef)})
    return found


def own_names(cls):
    """What `cls` defines: its methods and class attributes, and every `self.X` it assigns."""
    names = set()
    for node in cls.body:
        if isinstance(node, ast.FunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    for node in ast.walk(cls):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, (ast.AugAssign, ast.AnnAssign)) else []
        for target in targets:
            for t in (target.elts if isinstance(target, ast.Tuple) else [target]):
                if is_self_attribute(t):
                    names.add(t.attr)
    return names


def is_self_attribute(node):
    return isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self"


def methods(cls):
    return {node.name for node in cls.body if isinstance(node, ast.FunctionDef)}


def parts_held(cls, known):
    """{attribute: part class name} for each `self.X = Part(...)` of `cls`."""
    held = {}
    for node in ast.walk(cls):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and \
                isinstance(node.value.func, ast.Name) and node.value.func.id in known:
            held.update({t.attr: node.value.func.id for t in node.targets if is_self_attribute(t)})
    return held


def problems():
    found = classes()
    # A part handed to another (Leases gets the HeldRuns, Outages the Stop: `self.stop = stop`)
    # goes by the name the Worker gives it.
    named = parts_held(found["Worker"], found)
    out = []
    for name, cls in found.items():
        out += [f"{name} has a base class ({ast.unparse(base)})" for base in cls.bases]
        own = own_names(cls)
        handed = {t.attr for node in ast.walk(cls) if isinstance(node, ast.Assign) and isinstance(node.value, ast.Name)
                  for t in node.targets if is_self_attribute(t) and t.attr == node.value.id}
        held = {attr: part for attr, part in named.items() if attr in handed} | parts_held(cls, found)
        for node in ast.walk(cls):
            if is_self_attribute(node) and node.attr not in own:
                out.append(f"{name} uses self.{node.attr}, which it does not define")
            # self.part.thing: only a method of the part, never its data, and never written.
            if isinstance(node, ast.Attribute) and is_self_attribute(node.value) and node.value.attr in held:
                part = held[node.value.attr]
                if node.attr not in methods(found[part]) or isinstance(node.ctx, ast.Store):
                    out.append(f"{name} reads self.{node.value.attr}.{node.attr}, a field of {part}")
    return out


def test_the_worker_has_no_mixin_and_no_part_reads_another_parts_fields():
    assert problems() == []


def test_the_worker_holds_its_parts():
    worker = classes()["Worker"]
    assert sorted(parts_held(worker, classes()).values()) == [
        "Claimer", "HeldRuns", "Leases", "Outages", "Stop", "Trips"]
