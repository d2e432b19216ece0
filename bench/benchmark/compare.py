"""``python -m bench compare FIRST SECOND``: does a ratio hold from run to run?

Two runs of the same command on a shared machine never give the same pairs/s; what the benchmark claims is the ratio to
the baseline, taken round by round. This command puts the two runs' ratios side by side, measurement by measurement, and
says whether the second run's median falls inside the first run's range of per-round ratios (min-max). A measurement
only one run has is listed as such, never counted.
"""

from __future__ import annotations

from bench import frameworks
from bench.benchmark.record import Measurement, load
from bench.benchmark.stats import round_ratios
from bench.render import table


def register(sub) -> None:
    p = sub.add_parser("compare", help="the speed ratios of two benchmark runs side by side: do they hold?")
    p.add_argument("first", help="results.jsonl of the first run, or its folder")
    p.add_argument("second", help="results.jsonl of the second run, or its folder")
    p.add_argument("--baseline", default=frameworks.BASELINE,
                   help="the implementation ratios are taken to [%(default)s]")
    p.set_defaults(func=cmd_compare)


def _by_key(rows: list[dict]) -> dict:
    return {(r["device"], r["mode"], r["transitions"], r["batch_size"], r["implementation"]): r for r in rows}


def compare(first: list[Measurement], second: list[Measurement], baseline: str | None = None) -> dict:
    """Rows (key, first ratio row or None, second ratio row or None, inside) and the count of second-run medians inside
    the first run's min-max (over the registry's baseline unless ``baseline`` names another)."""
    a, b = _by_key(round_ratios(first, baseline)), _by_key(round_ratios(second, baseline))
    rows = [{"key": key, "first": a.get(key), "second": b.get(key),
             "inside": a[key]["min"] <= b[key]["median"] <= a[key]["max"] if key in a and key in b else None}
            for key in sorted(set(a) | set(b))]  # key: (device, mode, transitions, batch size, implementation)
    held = [row["inside"] for row in rows if row["inside"] is not None]
    return {"rows": rows, "inside": sum(held), "compared": len(held)}


def format_compare(result: dict, baseline: str | None = None) -> str:
    baseline = baseline or frameworks.BASELINE

    cell = lambda r: "not measured" if r is None else \
        f"{r['median']:.2f}x ({r['min']:.2f}-{r['max']:.2f}, {r['rounds'] or 'not interleaved'})"  # noqa: E731
    verdict = {True: "yes", False: "**no**", None: "-"}
    return "\n".join([f"Speed over {baseline}: median of the per-round ratios (min-max, rounds)", "", table(
        ["device", "mode", "transitions", "batch", "implementation", "first run", "second run", "second inside first"],
        [[*row["key"], cell(row["first"]), cell(row["second"]), verdict[row["inside"]]] for row in result["rows"]]),
        "", f"{result['inside']} of {result['compared']} medians of the second run lie inside the first run's "
            "min-max."])


def cmd_compare(args) -> int:
    first, second = load([args.first]), load([args.second])
    result = compare(first, second, args.baseline)
    if not result["compared"]:
        raise ValueError(f"the two runs have no measurement in common with a {args.baseline} baseline")
    print(format_compare(result, args.baseline))
    return 0
