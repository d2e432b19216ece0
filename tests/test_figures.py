"""docs/figures stay true through their numbers: figures.json keeps what each figure drew and from where, the
check draws each afresh and compares that (never the SVG bytes, which move with matplotlib's version), and the
numbers it keeps are the records' and the project code's, recomputed here by a second, plain computation.
Whether the committed figures are current is CI's check (python -m bench check), not these tests'.
"""

from __future__ import annotations

import json
import shutil
import statistics
import types

import pytest

pytest.importorskip("matplotlib")

from bench import frameworks, reproduce  # noqa: E402  (after the skip: the figures need matplotlib)
from bench.cli import main  # noqa: E402
from bench.figures import index, parsing  # noqa: E402
from bench.figures.runs import HEADLINE_RUNS  # noqa: E402
from bench.render.sources import FIGURES_DIR, Results  # noqa: E402
from shared.transitions import REDUCE, SHIFT, TRANSITION_NAMES, build_tree, parse  # noqa: E402

ROOT = reproduce.ROOT
RESULTS = ROOT / "results"
FIGURES = ROOT / FIGURES_DIR
INDEX = json.loads((FIGURES / index.INDEX).read_text())
CODES = {name: code for code, name in TRANSITION_NAMES.items()}


def read_jsonl(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def spread(ratios: list[float]) -> dict:
    """Median, quartiles (linear interpolation between order statistics) and range of per-round ratios."""
    q1, median, q3 = statistics.quantiles(ratios, n=4, method="inclusive") if len(ratios) > 1 else ratios * 3
    return {"median": median, "q1": q1, "q3": q3, "min": min(ratios), "max": max(ratios)}


def ratios_over_baseline(records: list[dict]) -> dict:
    """(device, mode, transitions, batch size, implementation) -> spread of its pairs/s over the baseline's,
    round by round where both were timed in the same rounds, else the ratio of the overall figures."""
    base = {(r["device"], r["mode"], r.get("transitions", "gold"), r["batch_size"]): r
            for r in records if r["implementation"] == frameworks.BASELINE}
    out = {}
    for r in records:
        key = (r["device"], r["mode"], r.get("transitions", "gold"), r["batch_size"])
        b = base.get(key)
        if r["implementation"] == frameworks.BASELINE or b is None:
            continue
        mine, theirs = r.get("round_pairs_per_s") or [], b.get("round_pairs_per_s") or []
        if r.get("run_id") == b.get("run_id") and mine and len(mine) == len(theirs):
            ratios = [x / y for x, y in zip(mine, theirs)]
        else:
            ratios = [r["pairs_per_s"] / b["pairs_per_s"]]
        out[key + (r["implementation"],)] = spread(ratios)
    return out


def assert_spread(drawn: dict, expected: dict) -> None:
    for name in ("median", "q1", "q3", "min", "max"):
        assert drawn[name] == pytest.approx(expected[name], abs=2e-6), name


# ---------------------------------------------------------------------------
# A figure whose numbers differ is named; one whose bytes differ is not
# ---------------------------------------------------------------------------

def test_every_figure_is_in_the_index_with_its_sources():
    assert list(INDEX) == list(index.FIGURES)
    for name, entry in INDEX.items():
        assert entry["file"] == f"{name}.svg" and (FIGURES / entry["file"]).exists()
        assert entry["title"] and entry["sources"] and entry["data"], name


@pytest.fixture
def copy(tmp_path):
    """A root whose results are the repository's and whose docs/figures is a copy drawn from them today."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "results").symlink_to(RESULTS)
    shutil.copytree(FIGURES, tmp_path / FIGURES_DIR)
    assert index.figures(Results(tmp_path), write=True) == []
    return tmp_path


def test_a_figure_is_checked_through_its_numbers_not_its_bytes(copy):
    headline, entries_file = copy / FIGURES_DIR / "headline.svg", copy / FIGURES_DIR / index.INDEX
    drawn = json.loads(entries_file.read_text())
    headline.write_text(headline.read_text().replace("</svg>", "<!-- another matplotlib -->\n</svg>"))
    assert index.figures(Results(copy), write=False) == []  # a patch release of matplotlib: no failure
    entries = json.loads(entries_file.read_text())
    entries["padding"]["data"][0]["median"] += 0.5
    entries_file.write_text(json.dumps(entries))
    (copy / FIGURES_DIR / "levels.svg").unlink()
    problems = index.figures(Results(copy), write=False)
    assert len(problems) == 2 and "padding.svg" in problems[0] and "levels.svg" in problems[1], problems
    # Rendering redraws the two and leaves the other files as they were.
    assert index.figures(Results(copy), write=True) == []
    assert index.figures(Results(copy), write=False) == [] and "another matplotlib" in headline.read_text()
    assert json.loads(entries_file.read_text()) == drawn


def test_the_check_refuses_an_unknown_kind_in_one_line(capsys):
    assert main(["check", "--only", "figures,nothing"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "\n" not in err


def test_every_figure_is_linked_from_the_docs():
    texts = [(ROOT / "README.md").read_text()] + [p.read_text() for p in sorted((ROOT / "docs").glob("*.md"))]
    unlinked = [name for name in index.FIGURES if not any(f"figures/{name}.svg" in text for text in texts)]
    assert not unlinked, f"figures no document links: {unlinked}"


# ---------------------------------------------------------------------------
# The numbers drawn, recomputed from the records
# ---------------------------------------------------------------------------

def test_headline_ratios_are_the_records():
    expected = {}
    for run in HEADLINE_RUNS:  # the CPU run and the GPU run, one row of panels each
        records = read_jsonl(RESULTS / run / "results.jsonl")
        expected.update({key: value for key, value in ratios_over_baseline(records).items() if key[2] == "gold"})
    assert {key[0] for key in expected} == {"cpu", "gpu"}
    drawn = {(r["device"], r["mode"], r["transitions"], r["batch_size"], r["implementation"]): r
             for r in INDEX["headline"]["data"]}
    assert drawn.keys() == expected.keys() and expected
    for key, value in expected.items():
        assert_spread(drawn[key], value)


def test_padding_points_are_the_records():
    expected = {}
    for entry in reproduce.load_manifest():  # the committed runs; never a user's own under results/
        path = RESULTS / entry.name / "results.jsonl"
        if not path.exists():
            continue
        records = read_jsonl(path)
        impls = {r.get("implementation") for r in records}
        # Runs of default implementations only, each record with its padding share, the baseline among them.
        if (None in impls or frameworks.BASELINE not in impls or impls & frameworks.OPT_IN
                or any(r.get("padding_waste") is None for r in records)):
            continue
        waste = {(r["device"], r["mode"], r.get("transitions", "gold"), r["batch_size"], r["implementation"]):
                 r["padding_waste"] for r in records}
        for key, value in ratios_over_baseline(records).items():
            if key[1] == "infer" and key[2] == "gold" and key[4] not in frameworks.EAGER:
                expected[(entry.name,) + key] = dict(value, padding_waste=waste[key])
    drawn = {(p["run"], p["device"], p["mode"], p["transitions"], p["batch_size"], p["implementation"]): p
             for p in INDEX["padding"]["data"]}
    assert drawn.keys() == expected.keys()
    assert {"cpu", "cpu-no-padding", "cpu-pairs"} <= {key[0] for key in drawn}
    for key, value in expected.items():
        assert_spread(drawn[key], value)
        assert drawn[key]["padding_waste"] == pytest.approx(value["padding_waste"], abs=1e-6)


# ---------------------------------------------------------------------------
# The sentence, its trace and its thin stack
# ---------------------------------------------------------------------------

def test_the_shift_reduce_sentence_is_the_rule_and_its_parse():
    sentence = INDEX["shift-reduce"]["data"]["sentence"]
    rows = read_jsonl(ROOT / sentence["data_file"])
    row = rows[sentence["row"]]
    parsed = parse(row["sentence1_binary_parse"])
    assert sentence["tokens"] == list(parsed.tokens)
    assert [CODES[name] for name in sentence["transitions"]] == list(parsed.transitions)
    assert len(parsed.tokens) == parsing.SENTENCE_WORDS
    # The first such premise among the labelled rows (the reader skips rows annotators did not agree on).
    earlier = [r for r in rows[:sentence["row"]] if r["gold_label"] != "-"]
    assert all(len(parse(r["sentence1_binary_parse"]).tokens) != parsing.SENTENCE_WORDS for r in earlier)
    # The trace: the buffer empties word by word and the last stack holds the whole tree.
    steps = INDEX["shift-reduce"]["data"]["steps"]
    assert [s["transition"] for s in steps] == sentence["transitions"]
    assert steps[-1]["buffer"] == [] and len(steps[-1]["stack"]) == 1
    shifted = [sum(t == SHIFT for t in parsed.transitions[:k + 1]) for k in range(len(steps))]
    assert [len(s["buffer"]) for s in steps] == [len(parsed.tokens) - n for n in shifted]


def _phrase(rows: dict, k: int, tokens: list[str]):
    """The tree a thin-stack row holds, followed through its children's rows."""
    row = rows[k]
    if row["kind"] == "leaf":
        return tokens[row["word"]]
    assert row["kind"] == "reduce", f"row {k} is pointed at but holds no phrase"
    return tuple(_phrase(rows, child, tokens) for child in row["children"])


def _bracket(tree) -> str:
    return tree if isinstance(tree, str) else f"({_bracket(tree[0])} {_bracket(tree[1])})"


def test_the_thin_stack_pointers_hold_the_trace():
    data = INDEX["thin-stack"]["data"]
    tokens = data["sentence"]["tokens"]
    rows = {row["row"]: row for row in data["rows"]}
    assert sorted(rows) == list(range(data["N"] + data["T"]))
    trace = INDEX["shift-reduce"]["data"]["steps"]
    for step, traced in zip(data["steps"], trace, strict=True):
        live = step["pointers"][:step["sp"]]
        assert [_bracket(_phrase(rows, k, tokens)) for k in live] == traced["stack"], step["step"]
    transitions = [CODES[name] for name in data["sentence"]["transitions"]]
    root = data["steps"][-1]["pointers"][0]
    assert _phrase(rows, root, tokens) == build_tree(tokens, transitions)


def test_the_thin_stack_replay_is_the_jax_model_write():
    pytest.importorskip("jax")
    pytest.importorskip("flax")
    import jax.numpy as jnp

    from impl_jax.masked import SPINN

    data = INDEX["thin-stack"]["data"]
    N, T = data["N"], data["T"]
    transitions = [CODES[name] for name in data["sentence"]["transitions"]]
    # _write reads the layout of its module and writes the thin stack through its _scatter.
    module = types.SimpleNamespace(layout="thin")
    module._scatter = lambda *args: SPINN._scatter(module, *args)
    loop = types.SimpleNamespace(N=N, sentences=jnp.arange(1, dtype=jnp.int32))  # what _write reads of a _Loop
    stack, pointers = jnp.zeros((N + T + 1, 1, 2)), jnp.zeros((1, N + 1), jnp.int32)
    sp = bp = jnp.zeros((1,), jnp.int32)
    composed = jnp.ones((1, 2))
    for t, op in enumerate(transitions):
        is_shift, is_reduce = jnp.array([op == SHIFT]), jnp.array([op == REDUCE])
        stack, pointers, sp, bp = SPINN._write(module, loop, t, stack, pointers, sp, bp, is_shift, is_reduce,
                                               composed)
        step = data["steps"][t]
        assert pointers[0].tolist() == step["pointers"] and int(sp[0]) == step["sp"] and int(bp[0]) == step["bp"]


def test_the_thin_stack_draws_unwritten_slots_as_dashes_not_zeros():
    data = INDEX["thin-stack"]["data"]
    written, unwritten = set(), 0
    for step in data["steps"]:
        written.add(step["written_slot"])
        unwritten += data["N"] + 1 - len(written)
    assert unwritten > 0  # the sentence leaves slots unwritten, so the check below checks something
    svg = (FIGURES / "thin-stack.svg").read_text()
    assert svg.count(f">{parsing.UNUSED}</text>") == unwritten


# ---------------------------------------------------------------------------
# The graph sizes: like against like
# ---------------------------------------------------------------------------

def test_graph_size_counts_each_framework_s_loss_and_gradients_graph():
    """Every size drawn is of one batch's loss and its gradients, recomputed from the explain blocks'
    structured results: a recorded graph's nodes, or a traced program with each loop body counted once."""
    explained = json.loads((FIGURES / "explain.json").read_text())
    blocks = INDEX["graph-size"]["data"]["blocks"]
    assert {"pytorch", "dynet"} <= {name for b in blocks for name in b["recorded"]}
    assert {"tensorflow", "jax"} <= {name for b in blocks for name in b["traced"]}
    for block in blocks:
        result = explained[block["id"]]["result"]
        for name, size in block["recorded"].items():
            assert size == result[name]["graph"]["recorded"], (block["id"], name)
        for name, traced in block["traced"].items():
            program = result[name]["loss_and_grads"]
            if traced["loop"] == "while":  # the GraphDef's ops, and those of its while bodies and conditions
                expected = program["ops"] + sum(program["while_body_ops"]) + sum(program["while_cond_ops"])
            else:  # a jaxpr, nested equations (the scan bodies) counted
                expected = program["eqns_total"]
            assert traced["size"] == expected, (block["id"], name)
            assert traced["size"] > result[name]["graph"]["body"]  # more than the encoder's loop body alone


def test_no_figure_names_an_internal_anchor():
    # A guide's figure-block ids (fig-main, ...) are anchors for the tooling, not words for a reader.
    for name in index.FIGURES:
        svg = (FIGURES / f"{name}.svg").read_text()
        assert "fig-" not in svg, name


def _height(tree) -> int:
    return 0 if isinstance(tree, str) else 1 + max(_height(tree[0]), _height(tree[1]))


def test_the_levels_figure_computes_each_phrase_once_at_its_height_from_ready_rows():
    """Read against the data's own parses, not the scheduler: every phrase of every tree appears once, at the
    level of its height, and reads rows written by an earlier level (or the leaves)."""
    data = INDEX["levels"]["data"]
    rows = read_jsonl(ROOT / INDEX["levels"]["sources"][0]["file"])
    N = data["N"]
    phrase = {k * N + i: w for k, s in enumerate(data["sentences"]) for i, w in enumerate(s["tokens"])}
    ready = set(phrase)
    seen = []
    for level in data["levels"]:
        for node in level["nodes"]:
            assert node["left"] in ready and node["right"] in ready, (level["level"], node)
            phrase[node["row"]] = (phrase[node["left"]], phrase[node["right"]])
            assert _height(phrase[node["row"]]) == level["level"]
            seen.append((node["sentence"], _bracket(phrase[node["row"]])))
        ready |= {node["row"] for node in level["nodes"]}  # only after the level: a level reads none of its own
    for k, sentence in enumerate(data["sentences"]):
        parsed = parse(rows[sentence["row"]]["sentence1_binary_parse"])
        tree = build_tree(list(parsed.tokens), list(parsed.transitions))
        phrases = []

        def walk(t):
            if not isinstance(t, str):
                walk(t[0]), walk(t[1])
                phrases.append(_bracket(t))

        walk(tree)
        assert sorted(p for s, p in seen if s == k) == sorted(phrases)
        assert _bracket(phrase[data["roots"][k]]) == _bracket(tree)
    assert len(data["levels"]) == max(_height(phrase[r]) for r in data["roots"])


# ---------------------------------------------------------------------------
# Where a step's time goes (drawn in every run's report; in the documents once the default run is re-made with it)
# ---------------------------------------------------------------------------

def test_the_breakdown_figure_is_drawn_and_checked_from_a_run_s_records(tmp_path, monkeypatch):
    """The figure through the figures machinery on a root of one run: every gold-parse record at the smallest and the
    largest batch size, its step in parts that sum to it as the records say (a negative overhead kept), and a number
    that changes in the records is named by the check."""
    from bench.figures import runs

    (tmp_path / "results" / "cpu").mkdir(parents=True)
    (tmp_path / "docs" / "figures").mkdir(parents=True)
    (tmp_path / "results" / "manifest.toml").write_text(
        '[[folder]]\nname = "cpu"\nabout = "x"\ncommands = ["python -m bench run --out {out}"]\n')
    records = [{"implementation": impl, "framework": impl, "mode": mode, "batch_size": size, "transitions": "gold",
                "device": "cpu", "useful_s": 0.001 * size, "computed_s": 0.0015 * size, "step_s": step * size,
                **({"own_computed_s": 0.003 * size} if impl == "pytorch" else {})}
               for impl, step in (("pytorch", 0.01), ("jax", 0.0014)) for mode in ("infer", "train")
               for size in (1, 32, 128)]
    records.append({**records[0], "transitions": "predicted"})  # not drawn: gold parses only
    path = tmp_path / "results" / "cpu" / "results.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    monkeypatch.setattr(index, "FIGURES", {"breakdown": ("runs", "breakdown")})
    assert index.figures(Results(tmp_path), write=True) == []
    entry = json.loads((tmp_path / FIGURES_DIR / index.INDEX).read_text())["breakdown"]
    assert (tmp_path / FIGURES_DIR / "breakdown.svg").exists() and entry["sources"][0]["file"] == \
        "results/cpu/results.jsonl"
    drawn = {(row["implementation"], row["mode"], row["batch_size"]): row for row in entry["data"]}
    assert set(drawn) == {(impl, mode, size) for impl in ("pytorch", "jax") for mode in ("infer", "train")
                          for size in (1, 128)}
    for (impl, _, size), row in drawn.items():
        parts = [row[f"{part}_ms"] for part in ("useful", "waste", "slow_blas", "overhead")]
        assert sum(parts) == pytest.approx(row["step_ms"]) and row["useful_ms"] == pytest.approx(size)
        assert row["slow_blas_ms"] == pytest.approx(1.5 * size if impl == "pytorch" else 0.0)
    assert drawn["jax", "infer", 128]["overhead_ms"] == pytest.approx(-0.1 * 128)  # below its products: kept
    assert index.figures(Results(tmp_path), write=False) == []
    path.write_text(path.read_text().replace('"step_s": 0.01,', '"step_s": 0.02,', 1))
    (problem,) = index.figures(Results(tmp_path), write=False)
    assert "breakdown.svg" in problem and "numbers differ" in problem
    assert runs.breakdown_rows([]) == []
