"""The admin screen's pictures as geometry for server-drawn SVG (no chart library): the
dashboard's attempts per hour and a definition's latest runs. The templates draw what these
return; the colours are the stylesheet's, so the dark scheme applies to them too."""

from datetime import timezone

from markupsafe import Markup, escape

WIDTH = 520  # the SVG's viewBox width
WIDE = 1040  # a chart alone in a full-width card (the metrics page): its bars wider, its text the same size
LEFT = 56  # room for the y-axis labels, at the phone size of their font too
BASE = 124  # the x-axis's y
TALL = 110  # the tallest bar, at the axis's top value
STUB = 6  # a run with no duration (waiting, running, missed, skipped) still gets a mark
# Deploy labels (9 px text, static/app.css): about this wide per character, this far apart at
# least, in at most LABEL_ROWS rows of LABEL_ROW_HEIGHT below the chart's top.
LABEL_CHAR, LABEL_GAP, LABEL_ROWS, LABEL_ROW_HEIGHT = 5.5, 4, 3, 11


def nice_top(peak, scale=1):
    """The axis's top value: the smallest 1, 2 or 5 times a power of ten (from `scale` up) that
    is >= peak."""
    while True:
        for step in (1, 2, 5):
            if round(step * scale, 6) >= peak:
                return round(step * scale, 6)
        scale *= 10


def _ticks(top, words):
    return [{"y": round(BASE - TALL * share, 1), "label": words(top * share)} for share in (0, 0.5, 1)]


def _count(value):
    return f"{value:g}"


def _seconds(value):
    return f"{value:g} s" if value < 120 else f"{value / 60:g} min"


def hour_chart(rows, label_every=6, dated=False, marks=(), width=WIDTH):
    """rows of (start, succeeded, failed), oldest first: bars, y-axis ticks and a label every
    `label_every` bars: its UTC time, which static/local-times.js relabels in the viewer's zone,
    or when `dated` (bars of hours over a week) its day, in the viewer's zone by static/chart-days.js; and `marks` ((time, label), deploys:
    ops/deploy_marks.py) as vertical lines where they fall among the bars. `width`: the viewBox's
    (WIDE for a chart alone in a full-width card)."""
    # At least 2, so the half-way tick is a whole number of attempts.
    top = nice_top(max([2] + [max(ok, bad) for _, ok, bad in rows]))
    slot = (width - LEFT) / max(len(rows), 1)
    bars, labels = [], []
    for i, (hour, ok, bad) in enumerate(rows):
        x = LEFT + i * slot
        utc = hour.astimezone(timezone.utc)
        for offset, count, kind, words in ((2, ok, "ok", "succeeded"), (slot / 2, bad, "bad", "failed")):
            height = round(TALL * count / top, 1)
            bars.append({"x": round(x + offset, 1), "y": round(BASE - height, 1), "width": round(slot / 2 - 2, 1),
                         "height": height, "kind": kind, "hour": utc.isoformat(),
                         "utc": utc.strftime("%H:%M"), "rest": f" · {count} {words}"})
        if dated:
            # Every bar is a place for a day's label: static/chart-days.js writes the viewer's day
            # on the first bar of each of their days (a UTC day starts at another bar for most
            # zones); without it, every `label_every`-th bar keeps its UTC day.
            labels.append({"x": round(x + 2, 1), "hour": None, "day": utc.isoformat(),
                           "utc": utc.strftime("%a %d") if i % label_every == 0 else ""})
        elif i % label_every == 0:
            labels.append({"x": round(x + 2, 1), "hour": utc.isoformat(), "day": None, "utc": utc.strftime("%H:%M")})
    return {"bars": bars, "ticks": _ticks(top, _count), "labels": labels, "left": LEFT, "base": BASE,
            "width": width, "top": top, "marks": _deploy_lines(rows, slot, marks, width)}


# The series' colours, in order: mid tones that read on the light and the dark scheme alike.
SERIES_COLOURS = ("#3b7ddd", "#d9822b", "#1f9e74", "#b455b4", "#9a8a00", "#d1495b")


def series_chart(rows, series, label_every=6, dated=False, marks=(), width=WIDTH):
    """hour_chart's axis, labels and marks for `rows`' bars, with `series` ({name: count per bar})
    drawn as one line each instead of bars: each name's colour, points and total."""
    chart = hour_chart(rows, label_every, dated, marks, width)
    top = nice_top(max([2] + [n for counts in series.values() for n in counts]))
    slot = (width - LEFT) / max(len(rows), 1)
    lines = []
    for i, (name, counts) in enumerate(series.items()):
        points = " ".join(f"{round(LEFT + (k + 0.5) * slot, 1)},{round(BASE - TALL * n / top, 1)}"
                          for k, n in enumerate(counts))
        lines.append({"name": name, "colour": SERIES_COLOURS[i % len(SERIES_COLOURS)], "points": points,
                      "total": sum(counts)})
    return dict(chart, bars=[], ticks=_ticks(top, _count), top=top, lines=lines)


def _deploy_lines(rows, slot, marks, width):
    """Each mark's x among the bars (a mark 40 min into an hour's bar is 2/3 across it)."""
    if len(rows) < 2:
        return []
    start, step = rows[0][0], (rows[1][0] - rows[0][0]).total_seconds()
    lines, row_ends = [], [float("-inf")] * LABEL_ROWS  # where each row's last label ends
    for at, label in sorted(marks):
        utc = at.astimezone(timezone.utc)
        x = round(LEFT + (at - start).total_seconds() / step * slot, 1)
        short = label if len(label) <= 16 else label[:15] + "…"
        # Near the right edge the label goes left of its line: it was cut off by the chart's edge.
        end = x > width - 80
        left, right = (x - LABEL_CHAR * len(short) - 2, x) if end else (x, x + 2 + LABEL_CHAR * len(short))
        # Marks close together (two deploys an hour apart on the week's chart) wrote their labels
        # over each other: each label takes the first row where it clears the one before; with
        # every row taken it is left to the line's hover text.
        row = next((r for r, taken in enumerate(row_ends) if left > taken + LABEL_GAP), None)
        if row is not None:
            row_ends[row] = right
        lines.append({"x": x, "label": label, "short": short if row is not None else "",
                      "y": BASE - 104 + LABEL_ROW_HEIGHT * (row or 0),
                      "utc": utc.strftime("%Y-%m-%d %H:%M"), "end": end})
    return lines


def bar_marks(chart, relabel=True):
    """hour_chart's bars as SVG, each titled with its time and counts; with `relabel`, the time is
    one static/local-times.js shows in the viewer's zone. Joined here rather than in the template:
    a bar a minute over an hour is 120 elements, which Jinja took ~10 ms to write."""
    marks = []
    for b in chart["bars"]:
        hour = f' data-hour="{escape(b["hour"])}" data-rest="{escape(b["rest"])}"' if relabel else ""
        marks.append(f'<rect class="{escape(b["kind"])}" x="{b["x"]}" y="{b["y"]}" width="{b["width"]}" '
                     f'height="{b["height"]}"><title{hour}>{escape(b["utc"])} UTC{escape(b["rest"])}</title></rect>')
    return Markup("\n".join(marks))


def run_chart(history, slots):
    """A definition's runs (run_history.definition_history), oldest first, as one bar each:
    height its duration, class its outcome; runs with no duration get a stub."""
    top = nice_top(max([0.01] + [float(r.seconds) for r in history if r.seconds is not None]), scale=0.01)
    slot = (WIDTH - LEFT) / slots
    bars = []
    for i, run in enumerate(history):
        seconds = float(run.seconds) if run.seconds is not None else None
        height = STUB if seconds is None else max(round(TALL * seconds / top, 1), 1)
        created = run.created_at.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
        took = f" in {_seconds(round(seconds, 1 if seconds < 10 else 0))}" if seconds is not None else ""
        bars.append({"x": round(LEFT + i * slot + 1, 1), "y": round(BASE - height, 1), "width": round(slot - 2, 1),
                     "height": height, "status": run.status,
                     "title": f"#{run.id} {run.status}{took}, created {created}"})
    return {"bars": bars, "ticks": _ticks(top, _seconds), "left": LEFT, "base": BASE, "width": WIDTH}
