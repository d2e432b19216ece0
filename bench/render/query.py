"""The query language of a quoted value: ``TABLE[:MOD...] ARG... [/ TABLE[:MOD...] ARG...]``.

TABLE names rows of the results folder, ARGs select them (``*`` or a comma list), and the last names the key: dotted,
or ``A..B`` for a range of two keys of one row (a JSON file's or explain block's query is the key alone). MODs: digits,
a kind (KINDS; else ``kind_of``), an aggregate (max, min, sum, span, len). ``A / B`` is a ratio in A's digits and kind.

``field IMPL MODE TRANSITIONS BATCH KEY``: records; ``ratio MODE TRANSITIONS BATCH IMPL [OVER] [KEY]``: the median (or
q1, q3, min, max, busy, rounds) of per-round ratios over the baseline or OVER, or its ``standing``; ``best MODE
TRANSITIONS BATCH [KEY]``: the static implementation of the highest median (KEY, or ``lead``); ``standing-at MODE
TRANSITIONS BATCHES IMPL VERDICT [OVER]``: where IMPL leads, trails or is level; ``rounds``: all busy flags; ``target
WORDS... KEY``: the report's target; ``scale FRAMEWORK REPLICAS KEY``; ``eval RUN SPLIT WHICH KEY``, ``train RUN
WHICH KEY``, ``metrics RUN KEY`` (WHICH: last, ``*``, epoch=N, step=N); ``loss-diff RUNS [first]``; ``parses RUN
KEY``; ``compare FIRST KEY`` and ``train-diff BASE RUNS KEYS`` (the readers: TABLES).
"""

from __future__ import annotations

import math
from typing import Callable

from bench import frameworks
from bench.compare import compare
from bench.run import targets as targets_module
from bench.run.measurement import Measurement, dotted, round_flags, round_ratios
from bench.progress import duration
from bench.render.sources import QuoteError, Results
from bench import curves, scale

SCALE = {"ms": 1e3, "us": 1e6, "percent": 100, "gflops": 1e-9, "mib": 2 ** -20}
UNITS = {"ratio": "x", "seconds": " s", "ms": " ms", "us": " µs", "percent": " %", "gflops": " GFLOP/s", "mib": " MiB"}
DIGITS = {"ratio": 2, "seconds": 2, "ms": 1, "percent": 1, "number": 1, "relative": 1, "gflops": 1}  # others 0


def _relative(v: float, d: int) -> str:  # 1.5e-7, as the guides write a small relative difference
    mantissa, exponent = f"{v:.{d}e}".split("e")
    return "0" if v == 0 else f"{mantissa}e{int(exponent)}"


# kind -> writer(value, digits); a kind of UNITS writes its number, then the unit (once after a range).
KINDS: dict[str, Callable] = {
    **{kind: (lambda k: lambda v, d: f"{v * SCALE.get(k, 1):{'' if k in ('ratio', 'percent') else ','}.{d}f}"
              f"{UNITS[k]}")(kind) for kind in UNITS},
    "number": lambda v, d: f"{v:,.{d}f}", "count": lambda v, d: f"{int(v):,}", "plain": lambda v, d: f"{int(v)}",
    "relative": _relative, "wall": lambda v, d: duration(v), "text": lambda v, d: str(v),
    "yesno": lambda v, d: "yes" if v else "no", "verdict": lambda v, d: "PASS" if v else "MISS"}
# A key's last name (not an index) -> (kind, digits); then the names' beginnings or endings; then the type.
NAMES = {**dict.fromkeys(("median", "speedup", "masked_flops_over_useful"), ("ratio", None)),
         **dict.fromkeys(("q1", "q3", "min", "max", "speedup_q1", "speedup_q3"), ("number", 2)),
         **dict.fromkeys(("compute_s", "allreduce_wait_s", "straggler_gap_s"), ("seconds", 3)),
         **dict.fromkeys(("elapsed_s", "wall_s"), ("wall", None)),
         **dict.fromkeys(("waste", "efficiency", "parse_agreement"), ("percent", None)),
         **dict.fromkeys(("loss", "pairs_per_s"), ("number", None)),
         **dict.fromkeys(("max_rel_diff", "abs_diff"), ("relative", None)), "dev_bracket_f1": ("number", 3),
         "met": ("verdict", None)}
AFFIXES = [(("accuracy", "_accuracy_last", "_accuracy_best", "_rate", "_share", "_waste", "fraction_of_limit",
             "_fraction_of_device_peak", "_fraction_of_peak"), "percent"),
           (("max_abs_err", "max_rel_err"), "relative"), (("_flops_per_s",), "gflops"), (("_bytes",), "mib"),
           (("_s", "_s_median", "seconds", "_per_shape", "_s_p10", "_s_p90"), "seconds")]
AGGREGATES: dict[str, Callable] = {"max": max, "min": min, "sum": sum, "len": len, "span": lambda v: (min(v), max(v))}
DERIVED = {"compile_per_shape": lambda r: r.compile_s / max(r.warmup_shapes or 1, 1),
           "computed_over_useful": lambda r: targets_module.computed_over_useful(r),
           "cached_compile_per_shape": lambda r: r.cached_compile["compile_s"] / max(r.cached_compile["shapes"], 1)}


def kind_of(key: str, value) -> tuple[str, int | None]:
    """How a value is written: by its key's last name, else by its type."""
    name = next((p for p in reversed(key.split(".")) if not p.isdigit()), key)
    if isinstance(value, (bool, str)):
        return NAMES.get(name, ("yesno", None)) if isinstance(value, bool) else ("text", None)
    if name in NAMES:
        return NAMES[name]
    kind = next((kind for affixes, kind in AFFIXES if name.endswith(affixes) or name.startswith(affixes)), None)
    return kind or ("count" if isinstance(value, int) else "number"), None


def write(value, kind: str, digits: int | None = None) -> str:
    """A value (or a (low, high) range: the unit once, after it) as the documents write its kind."""
    d, writer = DIGITS.get(kind, 0) if digits is None else digits, KINDS[kind]
    if isinstance(value, tuple) and value[0] == value[1]:
        value = value[0]
    if isinstance(value, (list, dict)) or isinstance(value, float) and not math.isfinite(value):
        raise QuoteError(f"{str(value)[:40]} is not one value (a list or dict takes an aggregate)")
    if not isinstance(value, tuple):
        try:
            return writer(value, d)
        except (TypeError, ValueError):
            raise QuoteError(f"{value!r} cannot be written as {kind}") from None
    if kind not in UNITS:
        return f"{writer(value[0], d)}{' to ' if kind == 'relative' else '-'}{writer(value[1], d)}"
    return f"{writer(value[0], d).removesuffix(UNITS[kind])}-{writer(value[1], d)}"


def lookup(row, key: str):
    """A dotted key of a record (a Measurement's field, or a key computed from it: DERIVED) or of a dict."""
    measured = isinstance(row, Measurement)
    value = (DERIVED[key](row) if measured else row) if key in DERIVED else row.get(key) if measured else \
        dotted(row, key)
    if value is None:
        raise QuoteError(f"no {key!r} in {getattr(row, 'implementation', None) or 'the record'}")
    return value


def _match(value, pattern: str) -> bool:
    return pattern == "*" or str(value) in pattern.split(",")


def _ratios(results: Results, folder: str, mode, transitions, batch, over=None) -> list[dict]:
    """The ratio rows at a measurement, each with its ``standing``: ``leads`` where its interquartile range lies
    above 1, ``trails`` where below, else ``is level``."""
    return [{**row, "standing": "leads" if row["q1"] > 1 else "trails" if row["q3"] < 1 else "is level"}
            for row in round_ratios(results.measurements(folder), over or frameworks.BASELINE)
            if row["mode"] == mode and row["transitions"] == transitions and str(row["batch_size"]) == batch]


def ratio(results: Results, folder, mode, transitions, batch, impl, *rest):
    key = rest[-1] if rest and rest[-1].split("..")[0] in ("median", "q1", "min", "busy", "rounds", "standing") \
        else "median"
    over = rest[0] if rest and rest[0] != key else None
    return [r for r in _ratios(results, folder, mode, transitions, batch, over) if r["implementation"] == impl], key


def _listed(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def best(results: Results, folder, mode, transitions, batch, key="implementation"):
    """The static implementation of the highest median ratio; its ``lead`` is ``the fastest`` where no other static
    implementation's interquartile range reaches its own, else ``level with`` those that do."""
    rows = [r for r in _ratios(results, folder, mode, transitions, batch)
            if r["implementation"] not in frameworks.EAGER]
    if not rows:
        return [], key
    top = max(rows, key=lambda row: row["median"])
    level = [r["implementation"] for r in rows if r is not top and r["q3"] >= top["q1"]]
    return [{**top, "lead": f"level with {_listed(level)}" if level else "the fastest"}], key


def standing_at(results: Results, folder, mode, transitions, batches, impl, verdict, over=None):
    """The batch sizes of BATCHES at which IMPL's ratio has the standing VERDICT (leads, trails, level), as a phrase
    with its verb: ``leads at every batch size``, ``is level at batch 1 and 32``, ``trails at no batch size``."""
    if verdict not in ("leads", "trails", "level"):
        raise QuoteError(f"standing-at: a verdict is leads, trails or level, not {verdict!r}")
    sizes = batches.split(",")
    rows = {b: ratio(results, folder, mode, transitions, b, impl, *([over] if over else []))[0] for b in sizes}
    if not all(rows.values()):
        raise QuoteError(f"results/{folder}: no ratio of {impl} {mode} {transitions} at batch "
                         f"{', '.join(b for b, r in rows.items() if not r)}")
    hit = [b for b in sizes if rows[b][0]["standing"].endswith(verdict)]
    where = "at every batch size" if len(hit) == len(sizes) else f"at batch {_listed(hit)}" if hit else \
        "at no batch size"
    return [{"where": f"{'is level' if verdict == 'level' else verdict} {where}"}], "where"


def which(rows: list[dict], which: str) -> list[dict]:
    name, _, number = which.partition("=")
    if which not in ("last", "*") and name not in ("epoch", "step"):
        raise QuoteError(f"which record: last, *, epoch=N or step=N, not {which!r}")
    return rows[-1:] if which == "last" else rows if which == "*" else \
        [r for r in rows if abs(r.get(name, -1) - float(number)) < 1e-9][-1:]


def loss_diff(results: Results, folder, runs, against="every"):
    loaded = curves.load_runs([results.run_dir(folder, run) for run in runs.split(",")])
    return [row for row in curves.loss_agreement(loaded) if against != "first" or row["against"] ==
            loaded[0]["label"]], "max_rel_diff"


def train_diff(results: Results, folder, base, runs, keys):
    """|BASE - RUN| of each of KEYS at the steps both logged, for each of RUNS (REINFORCE runs across frameworks)."""
    logged = {run: {r["step"]: r for r in results.metrics(folder, run) if r.get("kind") == "train"}
              for run in [base, *runs.split(",")]}
    return [{"abs_diff": abs(lookup(record, key) - lookup(logged[base][step], key))} for run in runs.split(",")
            for step, record in logged[run].items() if step in logged[base] for key in keys.split(",")], "abs_diff"


# name -> reader(results, folder, *args) -> (rows, key): the rows selected and the key to read of them.
TABLES: dict[str, Callable] = {
    "field": lambda results, folder, impl, mode, transitions, batch, key: ([
        r for r in results.measurements(folder) if _match(r.implementation, impl) and _match(r.mode, mode)
        and _match(r.transitions, transitions) and _match(r.batch_size, batch)], key),
    "ratio": ratio, "best": best, "standing-at": standing_at, "loss-diff": loss_diff, "train-diff": train_diff,
    # how many of this run's ratio medians lie inside FIRST's range (bench compare FIRST this): no record holds it
    "compare": lambda results, folder, first, key: ([compare(results.measurements(first),
                                                             results.measurements(folder))], key),
    "parses": lambda results, folder, run, key: ([curves.parse_summary(results.run_dir(folder, run))], key),
    "rounds": lambda results, folder: ([{"busy": round_flags(results.measurements(folder))}], "busy"),
    "target": lambda results, folder, *words: ([r for r in targets_module.targets(results.measurements(folder))
                                                if " ".join(words[:-1]) in r["target"]], words[-1]),
    "scale": lambda results, folder, framework, replicas, key: ([
        r for r in scale.summary(results.records(folder)) if r["framework"] == framework
        and str(r["replicas"]) == replicas], key),
    "eval": lambda results, folder, run, split, chosen, key: (which([
        r for r in results.metrics(folder, run) if r.get("kind") == "eval" and _match(r["split"], split)], chosen),
        key),
    "train": lambda results, folder, run, chosen, key: (which([
        r for r in results.metrics(folder, run) if r.get("kind") == "train"], chosen), key),
    "metrics": lambda results, folder, run, key: ([r for r in results.metrics(folder, run) if key.split(".")[0] in r],
                                                  key),
}


def evaluate(results: Results, folder: str, query: str, source: dict | None = None) -> str:
    """The text a quote writes; ``source``: the JSON (a file, an explain result) whose key the query is."""
    (value, kind, digits, given), *over = [_part(results, folder, part.split(), source) for part in query.split(" / ")]
    if over:
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (value, over[0][0])) \
                or not over[0][0]:
            raise QuoteError(f"{query}: no ratio of two numbers")
        value, kind, digits = value / over[0][0], given.get("kind", "ratio"), given.get("digits")
    return write(value, kind, digits)


def _part(results: Results, folder: str, words: list[str], source):
    """(value, its kind, its digits, the modifiers given) of one query."""
    if not words:
        raise QuoteError("an empty query")
    head, *mods = words[0].split(":")
    if source is None and head not in TABLES:
        raise QuoteError(f"unknown table {head!r}; choose from {', '.join(sorted(TABLES))}")
    try:
        rows, key = ([source], head) if source is not None else TABLES[head](results, folder, *words[1:])
    except TypeError as err:
        raise QuoteError(f"{head}: wrong arguments ({err})") from None
    low, _, high = key.partition("..")
    values = [(lookup(v, low), lookup(v, high)) if high else lookup(v, key) for v in rows]
    aggregate = next((m for m in mods if m in AGGREGATES), None)
    items = values[0] if aggregate and len(values) == 1 and isinstance(values[0], list) else values
    if len(items) != 1 and not (aggregate and items):
        raise QuoteError(f"{len(items)} values of {' '.join(words)}" + (", name an aggregate: " + ", ".join(
            AGGREGATES) if items else f" in results/{folder}"))
    value = AGGREGATES[aggregate](items) if aggregate else items[0]
    given = {}
    for mod in mods:
        if mod.isdigit() or mod in KINDS:
            given["digits" if mod.isdigit() else "kind"] = int(mod) if mod.isdigit() else mod
        elif mod not in AGGREGATES:
            raise QuoteError(f"{words[0]}: {mod!r} is no number of digits, kind ({', '.join(KINDS)}) or aggregate")
    kind, digits = ("count", None) if aggregate == "len" else kind_of(low, value[0] if isinstance(value, tuple)
                                                                      else value)
    return value, given.get("kind", kind), given.get("digits", digits), given
