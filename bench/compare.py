"""``python -m bench compare``: the speed ratios of two benchmark runs side by side, and whether each holds."""

from __future__ import annotations

from bench import frameworks
from bench.render.table import table
from bench.run.measurement import KEY_COLUMNS, Measurement, load, round_ratios


def register(sub) -> None:
    p = sub.add_parser("compare", help="the speed ratios of two benchmark runs side by side: do they hold?")
    p.add_argument("first", help="results.jsonl of the first run, or its folder")
    p.add_argument("second", help="results.jsonl of the second run, or its folder")
    p.add_argument("--baseline", default=frameworks.BASELINE,
                   help="the implementation ratios are taken to [%(default)s]")
    p.set_defaults(func=cmd_compare)


def compare(first: list[Measurement], second: list[Measurement], baseline: str | None = None) -> dict:
    """Does a ratio hold from run to run? Each measurement's per-round ratios of both runs (a measurement only one run
    has is listed, never counted), whether the second run's median lies in the first run's min-max, and how many do."""
    a, b = ({(r["device"], r["mode"], r["transitions"], r["batch_size"], r["implementation"]): r
             for r in round_ratios(run, baseline)} for run in (first, second))
    rows = [{"key": key, "first": a.get(key), "second": b.get(key),
             "inside": a[key]["min"] <= b[key]["median"] <= a[key]["max"] if key in a and key in b else None}
            for key in sorted(set(a) | set(b))]  # key: (device, mode, transitions, batch size, implementation)
    held = [row["inside"] for row in rows if row["inside"] is not None]
    return {"rows": rows, "inside": sum(held), "compared": len(held)}


def format_compare(result: dict, baseline: str = frameworks.BASELINE) -> str:
    cell = lambda r: "not measured" if r is None else \
        f"{r['median']:.2f}x ({r['min']:.2f}-{r['max']:.2f}, {r['rounds'] or 'not interleaved'})"  # noqa: E731
    verdict = {True: "yes", False: "**no**", None: "-"}
    return "\n".join([f"Speed over {baseline}: median of the per-round ratios (min-max, rounds)", "", table(
        [*KEY_COLUMNS, "first run", "second run", "second inside first"],
        [[*row["key"], cell(row["first"]), cell(row["second"]), verdict[row["inside"]]] for row in result["rows"]]),
        "", f"{result['inside']} of {result['compared']} medians of the second run lie inside the first run's "
            "min-max."])


def cmd_compare(args) -> int:
    result = compare(load([args.first]), load([args.second]), args.baseline)
    if not result["compared"]:
        raise ValueError(f"the two runs have no measurement in common with a {args.baseline} baseline")
    print(format_compare(result, args.baseline))
    return 0
