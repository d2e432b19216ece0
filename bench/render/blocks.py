"""The block functions: a table (or a few lines) rendered from the records of one results folder.

A document writes ``<!-- render: NAME FOLDER ARGS... -->``, then the text this
module renders, then ``<!-- /render -->``. The tables use the reports' own
helpers (``bench.benchmark.report``, ``bench.training``), so they read a run
as its report does.
"""

from __future__ import annotations

from typing import Callable

from bench import frameworks
from bench.benchmark import compare as compare_runs
from bench.benchmark import markdown, stats
from bench.benchmark import targets as targets_module
from bench.render import values
from bench.render.sources import Results
from bench.render.values import QuoteError
from bench.training import curves, scaling

BLOCKS: dict[str, Callable[..., str]] = {}


def block(name: str):
    def register(fn):
        BLOCKS[name] = fn
        return fn
    return register


def render(results: Results, name: str, folder: str, *args: str) -> str:
    """A block's text; an argument ``key=value`` is passed by name (``over=dynet-unbatched``)."""
    if name not in BLOCKS:
        raise QuoteError(f"unknown block function {name!r}; choose from {', '.join(sorted(BLOCKS))}")
    positional = [a for a in args if "=" not in a]
    named = dict(a.split("=", 1) for a in args if "=" in a)
    try:
        return BLOCKS[name](results, folder, *positional, **named)
    except TypeError as err:
        raise QuoteError(f"{name}: wrong arguments ({err})") from None


def _list(text: str) -> list[str]:
    return [part for part in text.split(",") if part]


def _impl_order(names) -> list[str]:
    """Implementations in the registry's order (the baseline first), others after, sorted."""
    known = [n for n in frameworks.IMPLEMENTATIONS if n in names]
    return known + sorted(set(names) - set(known))


# ---------------------------------------------------------------------------
# Benchmark runs
# ---------------------------------------------------------------------------

@block("measured-at")
def measured_at(results: Results, folder: str) -> str:
    """Where and at which commit a folder was made (its reproduced.json), and, where its measured code has
    changed since, a sentence that says so: what a folder this machine cannot re-make (a GPU run) is quoted with."""
    from bench import reproduce

    stamp = results.stamp(folder)
    records = [r for rows in reproduce.folder_records(results.folder(folder)).values() for r in rows]
    commits = list(dict.fromkeys(r["git_commit"] for r in records if "git_commit" in r)) or [stamp["git_commit"]]
    machine = ", ".join(stamp.get("gpus") or []) or f"{stamp['cpu_count']} cores ({stamp['cpu']})"
    named = " and ".join(f"`{c[:12]}`" for c in commits)
    text = (f"Measured at commit{'s' if len(commits) > 1 else ''} {named} on {machine}, {stamp['started'][:10]}, by "
            f"`python -m bench reproduce {folder}`"
            + (" (interrupted, then completed with `--resume`)" if stamp.get("resumed") else "")
            + (" (records attested by the digest of their measured files)" if stamp.get("attested") else "") + ".")
    reasons = reproduce.stale_reasons(results.entries[folder], results.root)
    if reasons:
        text += (f" The code it measured has changed since ({reasons[0]}): these figures are that commit's, "
                 f"and `python -m bench reproduce {folder}` on a machine with a "
                 f"{(results.entries[folder].needs or 'CPU').upper()} makes them today's.")
    return text


@block("ratio-table")
def ratio_table(results: Results, folder: str, modes: str, transitions: str, batches: str, impls: str = "*",
                over: str | None = None) -> str:
    """Speed over the baseline (or ``over=IMPL``), median of the per-round ratios (IQR), one row per mode, parse
    and implementation, one column per batch size; an empty cell where a measurement was not made."""
    baseline = over or frameworks.BASELINE
    rows = stats.round_ratios(results.measurements(folder), baseline)
    sizes = _list(batches)
    chosen = [r for r in rows if r["mode"] in _list(modes) and r["transitions"] in _list(transitions)
              and (impls == "*" or r["implementation"] in _list(impls))]
    if not chosen:
        raise QuoteError(f"results/{folder}: no ratios for {modes} {transitions} {impls}")
    cells = {(r["mode"], r["transitions"], r["implementation"], str(r["batch_size"])): r for r in chosen}
    lines = [f"| speed over {baseline} (IQR) | " + " | ".join(f"batch {b}" for b in sizes) + " |",
             "|---" * (len(sizes) + 1) + "|"]
    for mode in _list(modes):
        for trans in _list(transitions):
            for impl in _impl_order({r["implementation"] for r in chosen}):
                row = [cells.get((mode, trans, impl, b)) for b in sizes]
                if not any(row):
                    continue
                text = [f"{c['median']:.2f}x ({c['q1']:.2f}-{c['q3']:.2f})" if c else "" for c in row]
                lines.append(f"| {mode}, {trans}: {impl} | " + " | ".join(text) + " |")
    return "\n".join(lines)


@block("pairs-table")
def pairs_table(results: Results, folder: str, modes: str, transitions: str, batches: str) -> str:
    """Pairs/s of every implementation, one row per mode and parse, the batch sizes in each cell."""
    records = results.measurements(folder)
    impls = _impl_order({r.implementation for r in records})
    sizes = _list(batches)
    by = {(r.mode, r.transitions, r.implementation, str(r.batch_size)): r for r in records}
    lines = ["| pairs/s | " + " | ".join(impls) + " |", "|---" * (len(impls) + 1) + "|"]
    for mode in _list(modes):
        for trans in _list(transitions):
            measured = [b for b in sizes if any((mode, trans, i, b) in by for i in impls)]
            if not measured:
                continue
            cells = [" / ".join(f"{by[mode, trans, i, b].pairs_per_s:,.1f}" if (mode, trans, i, b) in by else "-"
                                for b in measured) for i in impls]
            lines.append(f"| {mode}, {trans}, batch {' / '.join(measured)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


@block("pairs-rows")
def pairs_rows(results: Results, folder: str, modes: str, transitions: str, batches: str, impls: str = "*") -> str:
    """Pairs/s, one row per mode, parse and batch size, one column per implementation (``-``: not measured)."""
    records = results.measurements(folder)
    chosen = _impl_order({r.implementation for r in records}) if impls == "*" else _list(impls)
    by = {(r.mode, r.transitions, str(r.batch_size), r.implementation): r for r in records}
    lines = ["| pairs/s | " + " | ".join(chosen) + " |", "|---" * (len(chosen) + 1) + "|"]
    for mode in _list(modes):
        for trans in _list(transitions):
            for b in _list(batches):
                if not any((mode, trans, b, i) in by for i in chosen):
                    continue
                cells = [f"{by[mode, trans, b, i].pairs_per_s:,.1f}" if (mode, trans, b, i) in by else "-"
                         for i in chosen]
                lines.append(f"| {mode}, {trans}, batch {b} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


@block("phases-table")
def phases_table(results: Results, folder: str, modes: str, transitions: str, batches: str, impls: str) -> str:
    """Where a batch's time goes, for implementations that split it (phase_s_per_batch): ms per batch."""
    records = [r for r in results.measurements(folder) if r.phase_s_per_batch]
    phases = list(dict.fromkeys(p for r in records for p in r.phase_s_per_batch))
    by = {(r.mode, r.transitions, str(r.batch_size), r.implementation): r for r in records}
    lines = ["| ms per batch | step | " + " | ".join(phases) + " |", "|---" * (len(phases) + 2) + "|"]
    for mode in _list(modes):
        for trans in _list(transitions):
            for b in _list(batches):
                for impl in _list(impls):
                    r = by.get((mode, trans, b, impl))
                    if r is None:
                        continue
                    cells = [f"{1e3 * r.phase_s_per_batch[p]:,.1f}" if p in r.phase_s_per_batch else ""
                             for p in phases]
                    lines.append(f"| {mode}, {trans}, batch {b}: {impl} | {1e3 * r.step_s_median:,.1f} | "
                                 + " | ".join(cells) + " |")
    if len(lines) == 2:
        raise QuoteError(f"results/{folder}: no phases recorded for {impls} {modes} {transitions} {batches}")
    return "\n".join(lines)


@block("table2")
def table2(results: Results, folder: str) -> str:
    """The report's table beside the paper's Table 2: sentences/s, ratio over dynet-unbatched (IQR), the paper's."""
    records = results.measurements(folder)
    if not markdown.table2_measured(records):
        raise QuoteError(f"results/{folder}: no Tree-LSTM training run of dynet and {markdown.TABLE2_BASELINE}")
    return markdown.format_table2(records)


@block("targets")
def targets(results: Results, folder: str) -> str:
    """The report's targets table: each goal, what the run measured, PASS or MISS."""
    return targets_module.format_targets(results.measurements(folder))


@block("outside")
def outside(results: Results, folder: str, first: str) -> str:
    """A list of this run's ratio medians that lie outside FIRST's per-round min-max (bench compare FIRST this)."""
    result = compare_runs.compare(results.measurements(first), results.measurements(folder))
    lines = [f"* {mode}, {trans}, batch {batch}, {impl}: {row['second']['median']:.3f}x here, "
             f"{row['first']['min']:.3f}-{row['first']['max']:.3f}x in results/{first}"
             for row in result["rows"] if row["inside"] is False
             for (device, mode, trans, batch, impl) in [row["key"]]]
    return "\n".join(lines) if lines else f"* none: every median lies inside results/{first}'s range"


@block("matrix")
def matrix(results: Results, folder: str, mode: str) -> str:
    """The report's algorithm x framework matrix of one mode."""
    text = markdown.format_matrix([r for r in results.measurements(folder) if r.mode == mode])
    return text


# ---------------------------------------------------------------------------
# bench data, bench scale
# ---------------------------------------------------------------------------

@block("padding-table")
def padding_table(results: Results, folder: str, batches: str) -> str:
    """The PAD share of the transition slots, pair batches and sentence batches, whole arrays and in a loop
    that stops at each batch's last real step (bench data --batch-size B)."""
    sizes = _list(batches)
    data = {b: results.json(folder, f"batch-{b}.json") for b in sizes}
    rows = [("pairs, whole arrays", "pairs", "waste"),
            ("pairs, in a loop that stops at the batch's last real step", "pairs", "loop_waste"),
            ("sentence batches, whole arrays", "sentences", "waste"),
            ("sentence batches, in such a loop", "sentences", "loop_waste")]
    lines = ["| PAD share of the slots | " + " | ".join(f"batch {b}" for b in sizes) + " |",
             "|---" * (len(sizes) + 1) + "|"]
    for label, what, key in rows:
        lines.append(f"| {label} | " + " | ".join(f"{100 * data[b][what]['padding'][key]:.1f} %" for b in sizes)
                     + " |")
    return "\n".join(lines)


@block("scaling-table")
def scaling_table(results: Results, folder: str) -> str:
    """bench scale's rows: pairs/s with K replicas (with one), speed-up (IQR), per-replica compute and wait."""
    rows = scaling.summary(results.records(folder))
    one = {row["framework"]: row for row in rows if row["replicas"] == 1}
    lines = ["| framework | replicas | pairs/s (1 replica) | speed-up over 1 (IQR) | compute s/step per replica "
             "| all-reduce wait s/step per replica | straggler gap |", "|---|---|---|---|---|---|---|"]
    for row in rows:
        if row["replicas"] == 1:
            continue
        wait = " / ".join(f"{v:.3f}" for v in row["allreduce_wait_s"]) if row["allreduce_wait_s"] else "-"
        compute = " / ".join(f"{v:.3f}" for v in row["compute_s"]) if row["compute_s"] else "-"
        gap = (f"{row['straggler_gap_s']:.3f} s ({100 * row['straggler_gap_share']:.0f} %)"
               if row["straggler_gap_s"] is not None else "-")
        base = one.get(row["framework"])
        lines.append(f"| {row['framework']} | {row['replicas']} | {row['pairs_per_s']:,.1f} "
                     f"({base['pairs_per_s']:,.1f}) | {row['speedup']:.2f}x ({row['speedup_q1']:.2f}-"
                     f"{row['speedup_q3']:.2f}) | {compute} | {wait} | {gap} |")
    return "\n".join(lines)


# ---------------------------------------------------------------------------
# Training runs
# ---------------------------------------------------------------------------

def _evals(results, folder, run, split):
    return [r for r in results.metrics(folder, run) if r.get("kind") == "eval" and r["split"] == split]


def _at_epoch(evals, epoch: int):
    chosen = [r for r in evals if abs(r["epoch"] - epoch) < 1e-9]
    if not chosen:
        raise QuoteError(f"no evaluation at epoch {epoch}")
    return chosen[-1]


def _pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def _wall(results, folder, run) -> str:
    return values.Value(max(r.get("elapsed_s", 0.0) for r in results.metrics(folder, run)), "wall").write()


@block("accuracy-table")
def accuracy_table(results: Results, folder: str, runs: str, epoch: str) -> str:
    """Per run: dev accuracy at epoch EPOCH / best / last, train accuracy at the last evaluation, wall time."""
    lines = [f"| run | dev accuracy, epoch {epoch} / best / last | train accuracy, last | wall time |",
             "|---|---|---|---|"]
    for run in _list(runs):
        dev, train = _evals(results, folder, run, "dev"), _evals(results, folder, run, "train")
        if not dev or not train:
            raise QuoteError(f"results/{folder}/{run}: no dev or train evaluation")
        lines.append(f"| {run} | {_pct(_at_epoch(dev, int(epoch))['accuracy'])} / "
                     f"{_pct(max(r['accuracy'] for r in dev))} / {_pct(dev[-1]['accuracy'])} "
                     f"| {_pct(train[-1]['accuracy'])} | {_wall(results, folder, run)} |")
    return "\n".join(lines)


@block("memorise-table")
def memorise_table(results: Results, folder: str, runs: str, epochs: str, threshold: str) -> str:
    """Per run: train accuracy after each of EPOCHS, the first epoch at THRESHOLD or more, wall time."""
    chosen = _list(epochs)
    lines = [f"| run | train accuracy after epoch {' / '.join(chosen)} | first epoch at >= "
             f"{100 * float(threshold):g} % | wall time |", "|---|---|---|---|"]
    for run in _list(runs):
        train = _evals(results, folder, run, "train")
        first = next((int(round(r["epoch"])) for r in train if r["accuracy"] >= float(threshold)), None)
        cells = " / ".join(f"{100 * _at_epoch(train, int(e))['accuracy']:.1f}" for e in chosen)
        lines.append(f"| {run} | {cells} % | {first if first is not None else 'never'} "
                     f"| {_wall(results, folder, run)} |")
    return "\n".join(lines)


@block("equivalence-table")
def equivalence_table(results: Results, folder: str, *groups: str) -> str:
    """Per group ``PREFIX:F1,F2...`` (``sgd:pytorch,jax``): the largest relative loss-curve difference of each
    framework's run PREFIX-F from the reference's PREFIX-reference (the smallest and largest over frameworks),
    and between any two frameworks."""
    lines = ["| runs | each framework vs the float64 reference | between frameworks |", "|---|---|---|"]
    for group in groups:
        prefix, _, names = group.partition(":")
        runs = [f"{prefix}-{name}" for name in _list(names)]
        loaded = curves.load_runs([results.run_dir(folder, f"{prefix}-reference")]
                                  + [results.run_dir(folder, run) for run in runs])
        rows = curves.loss_agreement(loaded)
        reference = [r["max_rel_diff"] for r in rows if r["against"] == loaded[0]["label"]]
        between = [r["max_rel_diff"] for r in rows if r["against"] != loaded[0]["label"]]
        rel = lambda x: values.Value(x, "relative").write()  # noqa: E731
        span = values.Value((min(reference), max(reference)), "relative", separator=" to ").write()
        lines.append(f"| {prefix} ({', '.join(_list(names))}) | {span} "
                     f"| {rel(max(between)) + ' at most' if between else '-'} |")
    return "\n".join(lines)


@block("parse-table")
def parse_table(results: Results, folder: str, runs: str) -> str:
    """bench.training.parse_summary's table of arithmetic runs: parses, accuracy, bracket F1, REINFORCE figures."""
    from bench.training import parse_summary

    return parse_summary.format_table([parse_summary.summarize(results.run_dir(folder, run))
                                       for run in _list(runs)])


@block("supervised-table")
def supervised_table(results: Results, folder: str, runs: str, epochs: str) -> str:
    """Per run with a transition head: its held-out transition accuracy (teacher-forced), exact parses and
    bracket F1 at the first of EPOCHS, its held-out transition loss at each of EPOCHS, and its wall time."""
    chosen = _list(epochs)
    lines = [f"| run | held-out transition accuracy / exact parses / bracket F1, epoch {chosen[0]} "
             f"| held-out transition loss, epoch {' / '.join(chosen)} | wall time (evaluations included) |",
             "|---|---|---|---|"]
    for run in _list(runs):
        dev = _evals(results, folder, run, "dev")
        first = _at_epoch(dev, int(chosen[0])).get("parsing")
        if not first:
            raise QuoteError(f"results/{folder}/{run}: its evaluations have no parse metrics")
        losses = " / ".join(f"{_at_epoch(dev, int(e))['parsing']['transition_loss']:.4f}" for e in chosen)
        lines.append(f"| {run} | {_pct(first['transition_accuracy'])} / {_pct(first['exact_parse_rate'])} / "
                     f"{first['bracket_f1']:.3f} | {losses} | {_wall(results, folder, run)} |")
    return "\n".join(lines)


@block("sample-parse-table")
def sample_parse_table(results: Results, folder: str, runs: str, dev_rows: str) -> str:
    """SNLI-sample runs of one parse each: dev accuracy (last, best), train accuracy (last), the dev parses'
    bracket F1 against the Stanford parses, wall time. A fixed shape's F1 is a property of the shape on the dev
    rows DEV_ROWS (START:END of the embedded sample); a REINFORCE run's is what its last dev evaluation measured
    in predicted mode."""
    import json

    from bench.datasets import row_range
    from bench.training.parse_summary import shape_f1
    from shared.snli import SAMPLE_PATH, read_snli

    dev_pairs, _ = read_snli(SAMPLE_PATH, rows=row_range(dev_rows))
    lines = ["| run | parses in training | dev acc. (last) | dev acc. (best) | train acc. (last) "
             "| dev bracket F1 vs Stanford parses | wall |", "|---|---|---|---|---|---|---|"]
    for run in _list(runs):
        info = json.loads((results.run_dir(folder, run) / "run.json").read_text())
        dev, train = _evals(results, folder, run, "dev"), _evals(results, folder, run, "train")
        if "reinforce" in info:
            parses, f1 = "sampled (REINFORCE)", dev[-1]["parse_bracket_f1"]
        else:
            parses = info["data"].get("parse", "gold")
            f1 = 1.0 if parses == "gold" else shape_f1(dev_pairs, parses)
            parses = "Stanford parses" if parses == "gold" else parses
        lines.append(f"| {run} | {parses} | {_pct(dev[-1]['accuracy'])} | {_pct(max(r['accuracy'] for r in dev))} "
                     f"| {_pct(train[-1]['accuracy'])} | {f1:.3f} | {_wall(results, folder, run)} |")
    return "\n".join(lines)
