"""Every template, read as Jinja reads it: no value a job or a user wrote (payload, result,
error, stack, output, progress note, audit detail) is printed except through one of the masking
filters of web/rendering.py, and nothing is printed raw (`tojson`, `safe`, autoescape off).

A new template, or a new line in one, that prints such a value unmasked fails here before any
page shows it: the batch page printed its payload with `tojson`, token and all (issue 38)."""

from jinja2 import nodes

from jobsweb.web.rendering import MASKING_FILTERS, templates

# Attributes that hold what jobs and people wrote: printed only through MASKING_FILTERS.
HELD_TEXT = {"payload", "result", "last_error", "error", "last_stack", "stack", "output", "progress_note",
             "progress_data", "detail", "note", "body"}
# Filters that print markup as it is, or JSON no masking went through.
RAW = {"safe", "tojson"}
# Filters that print no text of what they are given.
NO_TEXT = {"length", "count"}
# Reads of an audit entry's detail that are no job text: the name of a deleted definition, and
# the runs list's filter (whose error text and payload filters refuse masked values) as a link.
PLAIN_KEYS = {"name", "filter"}


def held_text(node):
    """The attribute name when `node` reads one of HELD_TEXT (run.payload, a['error'])."""
    if isinstance(node, nodes.Getattr) and node.attr in HELD_TEXT:
        # form.payload: a form's field, holding what this person typed (or, editing a
        # definition, its payload masked by definition_form.py, restored from the stored one).
        is_form_field = isinstance(node.node, nodes.Name) and node.node.name == "form"
        return None if is_form_field else node.attr
    if isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Const) and node.arg.value in HELD_TEXT:
        return node.arg.value
    return None


def unmasked(node, masked=False):
    """Each (line, what) in `node` that reads held text outside a masking filter, or prints raw."""
    found = []
    if isinstance(node, nodes.Filter):
        if node.name in RAW:
            found.append((node.lineno, f"|{node.name}"))
        masked = masked or node.name in MASKING_FILTERS or node.name in NO_TEXT
    if not masked and held_text(node):
        return found + [(node.lineno, held_text(node))]
    for child in node.iter_child_nodes():
        if _plain_read(node, child):
            continue
        found += unmasked(child, masked)
    return found


def _plain_read(parent, child):
    """`e.detail['filter']`, `(e.detail or {}).get('name')`, `e.detail.get('filter')`: PLAIN_KEYS."""
    if isinstance(parent, nodes.Getitem) and child is parent.node:
        return isinstance(parent.arg, nodes.Const) and parent.arg.value in PLAIN_KEYS
    if isinstance(parent, nodes.Call) and isinstance(parent.node, nodes.Getattr) and parent.node.attr == "get":
        return child is parent.node and parent.args and isinstance(parent.args[0], nodes.Const) \
            and parent.args[0].value in PLAIN_KEYS
    return False


def problems(source, name="template"):
    """What a template's source prints unmasked or raw: ["name:line what", ...]."""
    tree = templates().parse(source)
    found = []
    for node in tree.find_all((nodes.Output, nodes.Assign, nodes.For, nodes.Macro, nodes.CallBlock)):
        if isinstance(node, nodes.Output):
            parts = [child for child in node.nodes if not isinstance(child, nodes.TemplateData)]
        elif isinstance(node, nodes.Assign):
            parts = [node.node]  # {% set x = run.payload %} would print it as x
        elif isinstance(node, nodes.For):
            parts = [node.iter]
        else:
            continue
        for part in parts:
            found += [f"{name}:{line} {what}" for line, what in unmasked(part)]
    for node in tree.find_all(nodes.ScopedEvalContextModifier):
        found += [f"{name}:{node.lineno} autoescape off"]
    return sorted(set(found))


def test_no_template_prints_a_payload_result_error_output_note_or_audit_detail_unmasked_or_raw():
    env = templates()
    found = []
    for name in env.list_templates(extensions=["html"]):
        source = env.loader.get_source(env, name)[0]
        found += problems(source, name)
    assert found == []


def test_the_check_finds_a_raw_or_unmasked_value_however_it_is_printed():
    assert problems("{{ batch.payload|tojson }}") == ["template:1 payload", "template:1 |tojson"]
    assert problems("{{ run.progress_note|truncate(60) }}") == ["template:1 progress_note"]
    assert problems("{{ run['result'] }}") == ["template:1 result"]
    assert problems("{% set p = run.payload %}{{ p }}") == ["template:1 payload"]
    assert problems("{% for line in a.output.splitlines() %}{{ line }}{% endfor %}") == ["template:1 output"]
    assert problems("{{ x|safe }}") == ["template:1 |safe"]
    assert problems("{% autoescape false %}{{ x }}{% endautoescape %}") == ["template:1 autoescape off"]
    # Through a masking filter, or a read of no job text, it passes.
    assert problems("{{ run.payload|pretty }} {{ a.error|job_text|truncate(9) }} {{ a.output|length }}") == []
    assert problems("{{ audit_detail(e.detail|masked_detail) }} {{ (e.detail or {}).get('name') }}") == []
    assert problems("{{ url_for('x', **e.detail['filter']) }}") == []
    assert problems("{{ e.detail.get('token') }}") == ["template:1 detail"]
