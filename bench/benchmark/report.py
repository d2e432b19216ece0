"""``python -m bench report``: tables, targets and plots from results.jsonl files.

Everything here is rendered from the structured records the workers wrote;
nothing is parsed back out of log text.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from bench.records import read_records
from shared.compare import ENCODING_TOL_F32, LOGITS_TOL_F32

BASELINE = "pytorch"  # the define-by-run implementation the static ones are compared with


def register(sub) -> None:
    p = sub.add_parser("report", help="render a Markdown table, the targets and PNG plots from results")
    p.add_argument("results", nargs="+", help="results.jsonl files, or folders holding one")
    p.add_argument("--out", default=None, help="folder for report.md and the plots [default: beside the first]")
    p.add_argument("--no-plots", action="store_true", help="only the Markdown report")
    p.set_defaults(func=cmd_report)


def load(paths) -> list[dict]:
    records = []
    for path in map(Path, paths):
        file = path / "results.jsonl" if path.is_dir() else path
        if not file.exists():
            raise FileNotFoundError(f"no results at {file}")
        records.extend(read_records(file))
    return records


def _fmt_bytes(n) -> str:
    return "-" if n is None else f"{n / 2**20:,.0f} MiB"


def format_table(records: list[dict]) -> str:
    """One Markdown row per record, grouped by device, mode and batch size."""
    header = ("| device | mode | batch | implementation | pairs/s | step median (ms) | p10-p90 (ms) "
              "| compile (s) | traces | useful GFLOP/s | % of matmul peak | peak memory | enc. err | logit err |")
    lines = [header, "|" + "---|" * (header.count("|") - 1)]
    key = lambda r: (r["device"], r["mode"], r["batch_size"], r["implementation"])
    for r in sorted(records, key=key):
        lines.append(
            f"| {r['device']} | {r['mode']} | {r['batch_size']} | {r['implementation']} "
            f"| {r['pairs_per_s']:,.1f} | {r['step_s_median'] * 1e3:,.1f} "
            f"| {r['step_s_p10'] * 1e3:,.1f}-{r['step_s_p90'] * 1e3:,.1f} "
            f"| {r['compile_s']:.2f} | {r['traces']} | {r['useful_flops_per_s'] / 1e9:,.2f} "
            f"| {100 * r['useful_flops_per_s'] / r['matmul_peak_flops_per_s']:.1f} "
            f"| {_fmt_bytes(r.get('peak_mem_bytes'))} | {r['max_abs_err_encoding']:.1e} "
            f"| {r['max_abs_err_logits']:.1e} |")
    return "\n".join(lines)


def _index(records):
    return {(r["device"], r["mode"], r["batch_size"], r["implementation"]): r for r in records}


def targets(records: list[dict]) -> list[dict]:
    """The benchmark's goals as ratios measured within one run (issue targets)."""
    rows = []
    by = _index(records)
    devices = sorted({r["device"] for r in records})
    static = sorted({r["implementation"] for r in records if r["implementation"] != BASELINE})
    for device in devices:
        goals = [(1, 3.0), (128, 1.0)] if device == "cpu" else [(128, 10.0)]
        for batch_size, goal in goals:
            base = by.get((device, "infer", batch_size, BASELINE))
            for impl in static:
                other = by.get((device, "infer", batch_size, impl))
                if base and other:
                    ratio = other["pairs_per_s"] / base["pairs_per_s"]
                    rows.append({"target": f"{impl} / {BASELINE} inference, batch {batch_size}, {device}",
                                 "goal": f">= {goal:g}x", "measured": f"{ratio:.2f}x", "met": ratio >= goal})
        candidates = [r for r in records if r["device"] == device and r["mode"] == "infer" and r["batch_size"] == 128]
        if candidates and device == "cpu":
            best = max(candidates, key=lambda r: r["useful_flops_per_s"])
            fraction = best["useful_flops_per_s"] / best["matmul_peak_flops_per_s"]
            rows.append({"target": f"best useful FLOP/s at batch 128 inference ({best['implementation']}), {device}",
                         "goal": ">= 30% of matmul peak", "measured": f"{100 * fraction:.1f}%",
                         "met": fraction >= 0.30})
        for r in records:
            if r["device"] != device:
                continue
            if r["implementation"] == "jax" and r["mode"] == "train" and device == "cpu":
                per_shape = r["compile_s"] / max(r.get("warmup_shapes", 1), 1)
                rows.append({"target": f"jax train compile per bucket shape, batch {r['batch_size']}, {device}",
                             "goal": "<= 3 s", "measured": f"{per_shape:.2f} s", "met": per_shape <= 3.0})
            if r["implementation"] == "tensorflow":
                rows.append({"target": f"tensorflow traces, {r['mode']} batch {r['batch_size']}, {device}",
                             "goal": "1 per function", "measured": str(r["traces"]), "met": r["traces"] <= 1})
    if records:
        worst_enc = max(records, key=lambda r: r["max_abs_err_encoding"])
        worst_log = max(records, key=lambda r: r["max_abs_err_logits"])
        rows.append({"target": f"encodings vs float64 reference (worst: {worst_enc['implementation']})",
                     "goal": f"<= {ENCODING_TOL_F32:g}", "measured": f"{worst_enc['max_abs_err_encoding']:.1e}",
                     "met": worst_enc["max_abs_err_encoding"] <= ENCODING_TOL_F32})
        rows.append({"target": f"logits vs float64 reference (worst: {worst_log['implementation']})",
                     "goal": f"<= {LOGITS_TOL_F32:g}", "measured": f"{worst_log['max_abs_err_logits']:.1e}",
                     "met": worst_log["max_abs_err_logits"] <= LOGITS_TOL_F32})
    return rows


def format_targets(records: list[dict]) -> str:
    rows = targets(records)
    if not rows:
        return "Targets: nothing to compare (no records)."
    lines = ["| target | goal | measured | met |", "|---|---|---|---|"]
    for row in rows:
        lines.append(f"| {row['target']} | {row['goal']} | {row['measured']} | {'yes' if row['met'] else 'NO'} |")
    return "\n".join(lines)


def plot(records: list[dict], out_dir: Path) -> list[Path]:
    """Throughput vs batch size, compile time, and agreement, as PNG files."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    impls = sorted({r["implementation"] for r in records})
    devices = sorted({r["device"] for r in records})
    modes = [m for m in ("infer", "train") if any(r["mode"] == m for r in records)]

    fig, axes = plt.subplots(len(devices), len(modes), figsize=(6 * len(modes), 4.2 * len(devices)),
                             squeeze=False)
    for i, device in enumerate(devices):
        for j, mode in enumerate(modes):
            ax = axes[i][j]
            for impl in impls:
                rows = sorted((r for r in records if r["implementation"] == impl and r["mode"] == mode
                               and r["device"] == device), key=lambda r: r["batch_size"])
                if rows:
                    ax.plot([r["batch_size"] for r in rows], [r["pairs_per_s"] for r in rows], marker="o", label=impl)
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("batch size (pairs)")
            ax.set_ylabel("sentence pairs / s")
            ax.set_title(f"{mode}, {device}")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend()
    fig.tight_layout()
    written.append(out_dir / "throughput.png")
    fig.savefig(written[-1], dpi=110)
    plt.close(fig)

    compiled = [r for r in records if r["compile_s"] > 0 or r["first_call_s"] > 0]
    if compiled:
        fig, ax = plt.subplots(figsize=(max(6, 0.5 * len(compiled)), 4))
        labels = [f"{r['implementation']}\n{r['mode']} B={r['batch_size']}" for r in compiled]
        ax.bar(range(len(compiled)), [r["first_call_s"] for r in compiled], label="first calls (all shapes)",
               color="#bbb")
        ax.bar(range(len(compiled)), [r["compile_s"] for r in compiled], label="compile/trace reported", width=0.5)
        ax.set_xticks(range(len(compiled)), labels, rotation=60, ha="right", fontsize=7)
        ax.set_ylabel("seconds")
        ax.set_title("warm-up: compile time and first calls")
        ax.legend()
        fig.tight_layout()
        written.append(out_dir / "compile.png")
        fig.savefig(written[-1], dpi=110)
        plt.close(fig)

    fig, ax = plt.subplots(figsize=(6, 4))
    worst = {}
    for r in records:
        w = worst.setdefault(r["implementation"], [0.0, 0.0])
        w[0] = max(w[0], r["max_abs_err_encoding"])
        w[1] = max(w[1], r["max_abs_err_logits"])
    names = sorted(worst)
    x = range(len(names))
    ax.bar([k - 0.2 for k in x], [max(worst[n][0], 1e-18) for n in names], width=0.4, label="encodings")
    ax.bar([k + 0.2 for k in x], [max(worst[n][1], 1e-18) for n in names], width=0.4, label="logits")
    ax.axhline(ENCODING_TOL_F32, color="C0", ls="--", lw=1)
    ax.axhline(LOGITS_TOL_F32, color="C1", ls="--", lw=1)
    ax.set_yscale("log")
    ax.set_xticks(list(x), names)
    ax.set_ylabel("max abs error vs float64 reference")
    ax.set_title("numerical agreement (dashed: tolerances)")
    ax.legend()
    fig.tight_layout()
    written.append(out_dir / "agreement.png")
    fig.savefig(written[-1], dpi=110)
    plt.close(fig)
    return written


def render_markdown(records: list[dict], sources) -> str:
    envs = {}
    for r in records:
        envs.setdefault(r["implementation"], r)
    lines = ["# SPINN benchmark report", "", f"Rendered by `python -m bench report {' '.join(map(str, sources))}`.", ""]
    lines.append("## Environment")
    lines.append("")
    for impl, r in sorted(envs.items()):
        lines.append(f"- **{impl}**: {r['framework']} {r['framework_version']}, {r['device']} "
                     f"({r['device_name']}), {r['dtype']}, commit {r['git_commit']}, {r['timestamp']}, "
                     f"threads {json.dumps(r.get('threads', {}))}, data {r['data']}")
    lines += ["", "## Results", "", format_table(records), "", "## Targets", "", format_targets(records), ""]
    return "\n".join(lines)


def cmd_report(args) -> int:
    records = load(args.results)
    if not records:
        raise ValueError("no records in the given results")
    first = Path(args.results[0])
    out_dir = Path(args.out) if args.out else (first if first.is_dir() else first.parent)
    out_dir.mkdir(parents=True, exist_ok=True)
    markdown = render_markdown(records, args.results)
    written = [] if args.no_plots else plot(records, out_dir)
    if written:
        markdown += "\n" + "\n".join(f"![{p.stem}]({p.name})" for p in written) + "\n"
    (out_dir / "report.md").write_text(markdown)
    print(markdown)
    print(f"wrote {out_dir / 'report.md'}" + "".join(f", {p}" for p in written), file=sys.stderr)
    return 0
