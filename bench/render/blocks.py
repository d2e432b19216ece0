"""The blocks, ``NAME ARG... [KEY=VALUE...]``: a table rendered from one results folder with the reports' own
helpers or quotes' queries; each one-chapter block's docstring names its chapter."""

from __future__ import annotations

from typing import Callable

from bench import curves, frameworks, reproduce
from bench import scale as scaling_runs
from bench.compare import compare
from bench.config import row_range
from bench.figures.style import registry_order
from bench.render.table import table
from bench.render.query import evaluate
from bench.render.sources import QuoteError, Results
from bench.report import TABLE2_BASELINE, format_matrix, format_table2, table2_measured
from bench.run import targets as targets_module
from bench.run.measurement import round_ratios
from shared.snli import SAMPLE_PATH, read_snli

BLOCKS: dict[str, Callable[..., str]] = {}


def block(fn):
    BLOCKS[fn.__name__.replace("_", "-")] = fn
    return fn


def render(results: Results, folder: str, spec: str) -> str:
    name, *args = spec.split()
    if name not in BLOCKS:
        raise QuoteError(f"unknown block {name!r}; choose from {', '.join(sorted(BLOCKS))}")
    try:
        return BLOCKS[name](results, folder, *[a for a in args if "=" not in a],
                            **dict(a.split("=", 1) for a in args if "=" in a))
    except TypeError as err:
        raise QuoteError(f"{name}: wrong arguments ({err})") from None


def _list(text: str) -> list[str]:
    return [part for part in text.split(",") if part]


@block
def measured_at(results: Results, folder: str) -> str:
    """Where, when and from which code a folder was measured, and if that code has changed since, how to re-make it."""
    stamp, entry = results.json(folder, reproduce.STAMP), results.entries[folder]
    records = [r for rows in reproduce.folder_records(results.folder(folder)).values() for r in rows]
    commits = list(dict.fromkeys(r["git_commit"] for r in records if "git_commit" in r)) or [stamp["git_commit"]]
    gpus = [f"{name} ({memory})" if memory else name for name, _, memory in (g.partition(", ")
                                                                             for g in stamp.get("gpus") or [])]
    machine = (f"one {gpus[0]}" if len(gpus) == 1 else f"{len(gpus)} GPUs ({'; '.join(gpus)})") if gpus else \
        f"a {stamp['cpu_count']}-core CPU ({stamp['cpu']})"
    text = (f"Measured on {stamp['started'][:10]} on {machine} by `python -m bench reproduce {folder}`, with the code "
            f"of commit{'s' if len(commits) > 1 else ''} {' and '.join(f'`{c[:12]}`' for c in commits)}."
            + (" The run was interrupted and finished with `--resume`." if stamp.get("resumed") else "")
            + (" Records whose machine could not name their commit were tied to one afterwards: the commit whose "
               "files match what they measured (`python -m bench reproduce --attest`)."
               if stamp.get("attested") else ""))
    reasons = reproduce.stale_reasons(entry, results.root)
    return text + (f" These numbers cannot be shown to measure today's code, so they are that code's: `python -m "
                   f"bench reproduce {folder}` on a machine with a {(entry.needs or 'CPU').upper()} measures today's. "
                   f"Why, in the words of `python -m bench reproduce --check`: {reasons[0]}." if reasons else "")


@block
def ratios(results: Results, folder, modes, transitions, batches, impls="*", over=None) -> str:
    """Speed over the baseline (or OVER), median (IQR) of per-round ratios: a row per mode, parse, implementation."""
    baseline = over or frameworks.BASELINE
    chosen = [r for r in round_ratios(results.measurements(folder), baseline) if r["mode"] in _list(modes)
              and r["transitions"] in _list(transitions) and (impls == "*" or r["implementation"] in _list(impls))]
    if not chosen:
        raise QuoteError(f"results/{folder}: no ratios for {modes} {transitions} {impls}")
    at = {(r["mode"], r["transitions"], r["implementation"], str(r["batch_size"])):
          f"{r['median']:.2f}x ({r['q1']:.2f}-{r['q3']:.2f})" for r in chosen}
    rows = [[f"{mode}, {trans}: {impl}"] + [at.get((mode, trans, impl, b), "") for b in _list(batches)]
            for mode in _list(modes) for trans in _list(transitions)
            for impl in registry_order({r["implementation"] for r in chosen})
            if any((mode, trans, impl, b) in at for b in _list(batches))]
    return table(["speed over " + baseline + " (IQR)"] + [f"batch {b}" for b in _list(batches)], rows)


@block
def pairs(results: Results, folder, modes, transitions, batches, impls="*", by="batch") -> str:
    """Pairs/s, a row per mode, parse and batch size, a column per implementation (``by=parse``: sizes in cells)."""
    records = results.measurements(folder)
    chosen = registry_order({r.implementation for r in records}) if impls == "*" else _list(impls)
    at = {(r.mode, r.transitions, str(r.batch_size), r.implementation): f"{r.pairs_per_s:,.1f}" for r in records}
    rows = []
    for mode, trans in ((mode, trans) for mode in _list(modes) for trans in _list(transitions)):
        sizes = [b for b in _list(batches) if any((mode, trans, b, i) in at for i in chosen)]
        if by == "parse" and sizes:
            rows.append([f"{mode}, {trans}, batch {' / '.join(sizes)}"]
                        + [" / ".join(at.get((mode, trans, b, i), "-") for b in sizes) for i in chosen])
        rows += [[f"{mode}, {trans}, batch {b}"] + [at.get((mode, trans, b, i), "-") for i in chosen]
                 for b in sizes if by == "batch"]
    return table(["pairs/s"] + chosen, rows)


@block
def report(results: Results, folder, section, mode=None) -> str:
    """A table of the folder's report (bench report): ``matrix MODE``, ``table2`` or ``targets``."""
    records = results.measurements(folder)
    if section == "table2" and not table2_measured(records):
        raise QuoteError(f"results/{folder}: no Tree-LSTM training of dynet and {TABLE2_BASELINE}")
    sections = {"matrix": lambda: format_matrix([r for r in records if r.mode == mode]),
                "table2": lambda: format_table2(records),
                "targets": lambda: targets_module.format_targets(records)}
    if section not in sections:
        raise QuoteError(f"report: a section is {', '.join(sections)}, not {section!r}")
    return sections[section]()


@block
def phases(results: Results, folder, modes, transitions, batches, impls) -> str:
    """Where a batch's time goes, ms per batch (phase_s_per_batch): a table of docs/autobatching.md."""
    records = [r for r in results.measurements(folder) if r.phase_s_per_batch]
    names = list(dict.fromkeys(p for r in records for p in r.phase_s_per_batch))
    by = {(r.mode, r.transitions, str(r.batch_size), r.implementation): r for r in records}
    rows = [[f"{mode}, {trans}, batch {b}: {impl}", f"{1e3 * r.step_s_median:,.1f}"]
            + [f"{1e3 * r.phase_s_per_batch[p]:,.1f}" if p in r.phase_s_per_batch else "" for p in names]
            for mode in _list(modes) for trans in _list(transitions) for b in _list(batches) for impl in _list(impls)
            for r in [by.get((mode, trans, b, impl))] if r is not None]
    if not rows:
        raise QuoteError(f"results/{folder}: no phases recorded for {impls} {modes} {transitions} {batches}")
    return table(["ms per batch", "step"] + names, rows)


@block
def outside(results: Results, folder, first) -> str:
    """The ratio medians of this run outside FIRST's per-round min-max: docs/results.md's repeated run."""
    lines = [f"* {mode}, {trans}, batch {batch}, {impl}: {row['second']['median']:.3f}x here, "
             f"{row['first']['min']:.3f}-{row['first']['max']:.3f}x in results/{first}"
             for row in compare(results.measurements(first), results.measurements(folder))["rows"]
             if row["inside"] is False for (_, mode, trans, batch, impl) in [row["key"]]]
    return "\n".join(lines) if lines else f"* none: every median lies inside results/{first}'s range"


@block
def padding(results: Results, folder, batches) -> str:
    """The PAD share of the transition slots (bench data --batch-size B): the table of docs/benchmark.md."""
    rows = [("pairs, whole arrays", "pairs.padding.waste"),
            ("pairs, in a loop that stops at the batch's last real step", "pairs.padding.loop_waste"),
            ("sentence batches, whole arrays", "sentences.padding.waste"),
            ("sentence batches, in such a loop", "sentences.padding.loop_waste")]
    return table(["PAD share of the slots"] + [f"batch {b}" for b in _list(batches)],
                 [[label] + [evaluate(results, folder, key, results.json(folder, f"batch-{b}.json"))
                             for b in _list(batches)] for label, key in rows])


@block
def scaling(results: Results, folder) -> str:
    """bench scale's rows beside one replica's (docs/data-parallel.md and docs/results.md)."""
    rows = scaling_runs.summary(results.records(folder))
    one, per = {row["framework"]: row for row in rows if row["replicas"] == 1}, scaling_runs.per_replica
    return table(["framework", "replicas", "pairs/s (1 replica)", "speed-up over 1 (IQR)", "compute s/step per "
                  "replica", "all-reduce wait s/step per replica", "straggler gap"], [
        [row["framework"], row["replicas"], f"{row['pairs_per_s']:,.1f} ({one[row['framework']]['pairs_per_s']:,.1f})",
         f"{row['speedup']:.2f}x ({row['speedup_q1']:.2f}-{row['speedup_q3']:.2f})", per(row, "compute_s"),
         per(row, "allreduce_wait_s"), "-" if row["straggler_gap_s"] is None else
         f"{row['straggler_gap_s']:.3f} s ({100 * row['straggler_gap_share']:.0f} %)"]
        for row in rows if row["replicas"] != 1])


# Training runs: RUNS are sub-folders holding metrics.jsonl; the cells are quotes' queries of them.

@block
def accuracy(results: Results, folder, runs, epoch) -> str:
    """Dev accuracy at EPOCH, best and last, train accuracy, wall time: the sample-overfit table of docs/training.md."""
    q = lambda text: evaluate(results, folder, text)  # noqa: E731
    return table(["run", f"dev accuracy, epoch {epoch} / best / last", "train accuracy, last", "wall time"], [
        [run, f"{q(f'eval {run} dev epoch={epoch} accuracy')} / {q(f'eval:max {run} dev * accuracy')} / "
              f"{q(f'eval {run} dev last accuracy')}", q(f"eval {run} train last accuracy"),
         q(f"metrics:max {run} elapsed_s")] for run in _list(runs)])


@block
def memorise(results: Results, folder, runs, epochs, threshold) -> str:
    """Train accuracy after each of EPOCHS and the first epoch at THRESHOLD: docs/training.md's memorising table."""
    rows = []
    for run in _list(runs):
        train = [r for r in results.metrics(folder, run) if r.get("kind") == "eval" and r["split"] == "train"]
        first = next((int(round(r["epoch"])) for r in train if r["accuracy"] >= float(threshold)), "never")
        cells = " / ".join(evaluate(results, folder, f"eval {run} train epoch={e} accuracy").removesuffix(" %")
                           for e in _list(epochs))
        rows.append([run, f"{cells} %", first, evaluate(results, folder, f"metrics:max {run} elapsed_s")])
    return table(["run", f"train accuracy after epoch {' / '.join(_list(epochs))}",
                  f"first epoch at >= {100 * float(threshold):g} %", "wall time"], rows)


@block
def equivalence(results: Results, folder, *groups) -> str:
    """Per group ``PREFIX:F1,F2...``: loss-curve differences from PREFIX-reference: docs/training.md's table."""
    rows = []
    for prefix, _, names in (group.partition(":") for group in groups):
        runs = ",".join(f"{prefix}-{name}" for name in _list(names))
        rows.append([f"{prefix} ({', '.join(_list(names))})",
                     evaluate(results, folder, f"loss-diff:span {prefix}-reference,{runs} first"),
                     evaluate(results, folder, f"loss-diff:max {runs}") + " at most" if "," in runs else "-"])
    return table(["runs", "each framework vs the float64 reference", "between frameworks"], rows)


@block
def parses(results: Results, folder, runs) -> str:
    """bench.curves' table of arithmetic runs (docs/learned-parses.md, twice)."""
    return curves.format_parses([curves.parse_summary(results.run_dir(folder, run)) for run in _list(runs)])


@block
def supervised(results: Results, folder, runs, epochs) -> str:
    """Held-out transition accuracy, exact parses, bracket F1 and loss by epoch: docs/learned-parses.md's table."""
    q = lambda text: evaluate(results, folder, text)  # noqa: E731
    first = _list(epochs)[0]
    return table(["run", f"held-out transition accuracy / exact parses / bracket F1, epoch {first}",
                  f"held-out transition loss, epoch {' / '.join(_list(epochs))}", "wall time (evaluations included)"],
                 [[run, f"{q(f'eval {run} dev epoch={first} parsing.transition_accuracy')} / "
                        f"{q(f'eval {run} dev epoch={first} parsing.exact_parse_rate')} / "
                        f"{q(f'eval:3 {run} dev epoch={first} parsing.bracket_f1')}",
                   " / ".join(q(f"eval:4 {run} dev epoch={e} parsing.transition_loss") for e in _list(epochs)),
                   q(f"metrics:max {run} elapsed_s")] for run in _list(runs)])


@block
def sample_parses(results: Results, folder, runs, dev_rows) -> str:
    """SNLI-sample runs of one parse each, accuracies and dev bracket F1: docs/learned-parses.md's SNLI table."""
    dev_pairs, _ = read_snli(SAMPLE_PATH, rows=row_range(dev_rows))
    q = lambda text: evaluate(results, folder, text)  # noqa: E731
    rows = []
    for run in _list(runs):
        info = results.json(folder, f"{run}/run.json")
        parse = "reinforce" if "reinforce" in info else info["data"].get("parse", "gold")
        f1 = q(f"eval:3 {run} dev last parse_bracket_f1") if parse == "reinforce" else \
            f"{1.0 if parse == 'gold' else curves.shape_f1(dev_pairs, parse):.3f}"
        rows.append([run, {"reinforce": "sampled (REINFORCE)", "gold": "Stanford parses"}.get(parse, parse),
                     q(f"eval {run} dev last accuracy"), q(f"eval:max {run} dev * accuracy"),
                     q(f"eval {run} train last accuracy"), f1, q(f"metrics:max {run} elapsed_s")])
    return table(["run", "parses in training", "dev acc. (last)", "dev acc. (best)", "train acc. (last)",
                  "dev bracket F1 vs Stanford parses", "wall"], rows)
