"""``python -m bench explain``'s flags, batch and views, each as a JSON-ready dict and as the text it prints."""

from __future__ import annotations

import argparse
import dataclasses
import functools
import importlib
import json
import os
import platform
import traceback
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench import ROOT, frameworks
from bench.config import SIZE_FIELDS, add_size_arguments, model_config
from shared.batching import PairBatch, make_pair_batch, sentences_transitions
from shared.levels import schedule
from shared.params import ModelConfig, init_params
from shared.snli import SAMPLE_PATH, Pair, read_snli
from shared.synthetic import random_transitions, shaped_pairs
from shared.transitions import PAD, REDUCE, SHIFT, TRANSITION_NAMES, Sentence, plain_transitions
from shared.vocab import Vocabulary

SHAPES = ("sample", "random", "left", "right", "balanced")
COMMAND = "python -m bench explain"


def add_arguments(p: argparse.ArgumentParser) -> None:
    variants = [name for name in frameworks.explained() if name not in frameworks.FRAMEWORKS]
    p.add_argument("--framework", default="all", choices=("all",) + frameworks.explained(),
                   help="which framework to explain (all: every one); a variant (" + ", ".join(variants) + ") "
                        "is explained only when named, beside its framework's own program [default: %(default)s]")
    p.add_argument("--batch-size", type=int, default=2,
                   help="pairs in the batch; each pair is two sentences [default: %(default)s]")
    p.add_argument("--shape", default="sample", choices=SHAPES,
                   help="sample: the first pairs of the embedded SNLI sample (their own parse trees); "
                        "random/left/right/balanced: random words in trees of that shape, --length words "
                        "each [default: %(default)s]")
    p.add_argument("--length", type=int, default=8, help="words per generated sentence [default: %(default)s]")
    p.add_argument("--data-seed", type=int, default=0, help="seed of generated words and trees [default: %(default)s]")
    p.add_argument("--seed", type=int, default=0, help="weight initialisation seed [default: %(default)s]")
    add_size_arguments(p, default="small")
    p.add_argument("--no-timing", action="store_true",
                   help="counts only: trace, but do not compile or run the compiled programs")
    p.add_argument("--out", default=None, help="folder to write the graphs to (.dot, .jaxpr.txt, .pbtxt)")
    p.add_argument("--json", action="store_true", help="print the figures as JSON instead of text")
    p.add_argument("--bad-input", default=None, choices=("transitions", "token"),
                   help="debugging: break the first premise (transitions: a REDUCE with one item on the "
                        "stack; token: an id outside the vocabulary) and show what each framework does")
    p.add_argument("--parse", action="store_true",
                   help="the batch in gold and in predicted mode with a transition head (docs/spec.md §7): "
                        "what deciding at run time costs each framework (host reads of decisions, loop-body ops)")
    p.add_argument("--levels", action="store_true",
                   help="the batch's host-scheduled levels (shared/levels.py), with and without the tracker, as "
                        "each levels implementation's Runner feeds them, and the loop body it runs over them")


def explainer(name: str, what: str = "graph to explain"):
    """The explain module of ``name``'s framework, or a one-line NotImplementedError that it has no ``what``."""
    platform = frameworks.platform(name)
    if not platform.explain_module:
        raise NotImplementedError(f"{platform.name} has no {what}")
    return importlib.import_module(platform.explain_module)


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The explain flags alone (``argv`` without ``python -m bench explain``)."""
    p = argparse.ArgumentParser(prog=COMMAND)
    add_arguments(p)
    return p.parse_args(argv)


def chosen(args: argparse.Namespace, view: str, among=None, shows: str = "frameworks, not variants") -> tuple[str, ...]:
    """The frameworks of ``among`` that ``--framework`` asks for; a ValueError naming the view for any other."""
    among = frameworks.FRAMEWORKS if among is None else tuple(among)
    if args.framework == "all":
        return among
    if args.framework not in among:
        raise ValueError(f"{view} shows {shows}; choose from all, {', '.join(among)}")
    return (args.framework,)


def command_line(args: argparse.Namespace) -> str:
    """The command that reproduces ``args``' figures (flags that differ from the defaults)."""
    defaults = parse_args([])
    flags = [f"--{flag.replace('_', '-')}" + ("" if value is True else f" {value}")
             for flag in ("framework", "batch_size", "shape", "length", "data_seed", "seed", "size", *SIZE_FIELDS,
                          "transition_head", "parse", "levels")
             if (value := getattr(args, flag)) is True or value != getattr(defaults, flag)]
    return " ".join([COMMAND] + flags)


def result_header(args: argparse.Namespace, batches: Batches, config: ModelConfig) -> dict:
    """The first keys of every explain result: command, machine, the batch's figures, the model's sizes."""
    b = batches.main
    transitions = sentences_transitions(b)
    return {"command": command_line(args),
            "machine": f"{platform.machine()} CPU, {os.cpu_count()} cores, Python {platform.python_version()}",
            "batch": {"source": batches.source, "trees": batches.trees, "pairs": b.size, "sentences": 2 * b.size,
                      "num_tokens": b.num_tokens, "num_steps": b.num_steps,
                      **{name: int(np.count_nonzero(transitions == op))
                         for name, op in (("shift", SHIFT), ("reduce", REDUCE), ("pad", PAD))},
                      "other_trees": batches.other_trees, "padded_num_tokens": batches.padded.num_tokens,
                      "padded_num_steps": batches.padded.num_steps},
            "model": {k: getattr(config, k) for k in ("vocab_size",) + SIZE_FIELDS}}


def format_header(result: dict, batch_lines: list[str] | None = None, model_note: str = "") -> list[str]:
    """The first lines of every explain text: the batch, the model, the frameworks' versions, the machine."""
    m, b = result["model"], result["batch"]
    return [
        f"batch: {b['pairs']} pair(s) = {b['sentences']} sentences, {b['source']}",
        *(batch_lines or [f"  N={b['num_tokens']} token slots, T={b['num_steps']} steps: "
                          f"{b['shift']} SHIFT, {b['reduce']} REDUCE, {b['pad']} PAD"]),
        f"model: E={m['embed_dim']} H={m['hidden_dim']} D={m['tracker_dim']} M={m['mlp_dim']} "
        f"L={m['mlp_layers']}, V={m['vocab_size']}{model_note}, float32, CPU",
        "versions: " + ", ".join(f"{name} {result[name]['framework_version']}"
                                 for name in frameworks.explained() if name in result),
        f"machine: {result['machine']}",
    ]


OTHER_SHAPES = ("left", "right", "balanced", "random")  # the define-by-run "same words, other trees" table
EXTRA_PADDING = 4  # the padded variant: N + 4 token slots (and T = 2(N + 4) - 1 steps)


@dataclass
class Batches:
    """The batch, and the variants the recompilation check feeds."""

    main: PairBatch
    reshaped: dict[str, PairBatch]  # shape -> the same words as other trees (same B, N, T)
    padded: PairBatch  # the same pairs with EXTRA_PADDING more token slots
    other_trees: str  # the shape of the variant that the recompilation check uses
    vocab_size: int
    source: str  # the batch in words, for the reader
    trees: str  # the trees' shape: "left", "right", "balanced", "random", or "SNLI parse" (the sample's own)


def _reshape(sentence: Sentence, shape: str, rng) -> Sentence:
    n = len(sentence)
    transitions = random_transitions(n, rng) if shape == "random" else plain_transitions(n, shape)
    return Sentence(sentence.tokens, tuple(transitions))


@functools.lru_cache(maxsize=1)
def _sample_pairs() -> tuple:
    return tuple(read_snli(SAMPLE_PATH)[0])


def make_batches(args: argparse.Namespace) -> Batches:
    if args.batch_size < 1 or args.length < 1:
        raise ValueError("--batch-size and --length must be >= 1")
    if args.shape == "sample":
        pairs = _sample_pairs()[:args.batch_size]  # labelled rows, in file order
        if len(pairs) < args.batch_size:
            raise ValueError(f"the sample has only {len(pairs)} labelled pairs")
        source, trees = "the SNLI sample (its own parse trees)", "SNLI parse"
    else:
        pairs = shaped_pairs(args.batch_size, length=args.length, shape=args.shape, seed=args.data_seed)
        source, trees = f"random words, {args.shape} trees of {args.length} words", args.shape
    vocab = Vocabulary.from_pairs(pairs, lowercase=True)
    n = max(max(len(p.premise), len(p.hypothesis)) for p in pairs)
    reshaped = {}
    for shape in OTHER_SHAPES:  # each from a fresh generator of the same seed
        rng = np.random.default_rng(args.data_seed + 1)
        other = [Pair(_reshape(p.premise, shape, rng), _reshape(p.hypothesis, shape, rng), p.label, p.pair_id)
                 for p in pairs]
        reshaped[shape] = make_pair_batch(other, vocab, num_tokens=n)
    return Batches(main=make_pair_batch(pairs, vocab, num_tokens=n), reshaped=reshaped,
                   padded=make_pair_batch(pairs, vocab, num_tokens=n + EXTRA_PADDING),
                   other_trees="random" if args.shape in ("left", "right", "balanced") else "left",
                   vocab_size=len(vocab), source=source, trees=trees)


def setup(args: argparse.Namespace) -> tuple[Batches, ModelConfig]:
    """The batch and its variants, and the model ``args`` describe."""
    batches = make_batches(args)
    return batches, model_config(args, batches.vocab_size, lowercase=True)


def explain(args: argparse.Namespace) -> dict:
    """The figures of one ``explain`` run, as a JSON-ready dict."""
    batches, config = setup(args)
    params = init_params(config, seed=args.seed)
    out = Path(args.out) if args.out else None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    result = {**result_header(args, batches, config), "timed": not args.no_timing}
    for name in frameworks.FRAMEWORKS if args.framework == "all" else (args.framework,):  # a variant when named
        result[name] = explainer(name).explain(name, batches, config, params, out, timing=not args.no_timing)
    if out is not None:
        (out / "explain.json").write_text(json.dumps(result, indent=2) + "\n")
        result["files"] = sorted(p.name for p in out.iterdir() if p.is_file())
    return result


def run(args: argparse.Namespace) -> dict:
    """``explain``; with ``--bad-input`` the debugging demonstration, with ``--levels`` the level schedule."""
    if args.bad_input:
        return explain_bad_input(args)
    if args.levels:
        return explain_levels(args)
    return explain_parse(args) if args.parse else explain(args)


# Text output
def format_text(result: dict) -> str:
    """The figures as the text that ``explain`` prints (and the guide quotes)."""
    if "bad_input" in result:
        return format_bad_input(result)
    if "schedules" in result:
        return format_levels(result)
    if "choice_steps_gold" in result["batch"]:
        return format_parse(result)
    b, lines = result["batch"], format_header(result)
    lines.insert(2, f"  variants: the same words as {b['other_trees']} trees (same B, N, T); "
                    f"the batch padded to N={b['padded_num_tokens']}, T={b['padded_num_steps']}")
    lines += [line for name in frameworks.explained() if name in result
              for line in explainer(name).format_explain(name, result[name])]
    if result.get("files"):
        lines += ["", "wrote: " + ", ".join(result["files"])]
    return "\n".join(lines)


# --parse: what a parse decided at run time costs each framework (docs/spec.md §7)
def explain_parse(args: argparse.Namespace) -> dict:
    """The figures of ``explain --parse``: the batch in gold and predicted mode, what deciding costs each."""
    batches, config = setup(args)
    if not config.tracker_dim:
        raise ValueError("--parse needs a tracker (the head reads its state): --tracker-dim must be > 0")
    config = dataclasses.replace(config, transition_head=True)
    params = init_params(config, seed=args.seed)
    result = result_header(args, batches, config)
    # The steps of the gold parses (all sentences) where both SHIFT and REDUCE would be valid: words left to shift
    # and two items on the stack before the step.
    transitions = sentences_transitions(batches.main)
    shift, moves = transitions == SHIFT, (transitions == SHIFT).astype(int) - (transitions == REDUCE)
    shifted, depth = np.cumsum(shift, axis=1) - shift, np.cumsum(moves, axis=1) - moves  # before each step
    result["batch"]["choice_steps_gold"] = int(np.count_nonzero((transitions != PAD) & (depth >= 2)
                                                                & (shifted < shift.sum(axis=1, keepdims=True))))
    for name in chosen(args, "--parse"):
        result[name] = explainer(name, "parse view").explain_parse(batches, config, params)
    return result


def format_parse(result: dict) -> str:
    b = result["batch"]
    lines = format_header(result, [f"  N={b['num_tokens']} token slots, T={b['num_steps']} steps; the gold parses "
                                   f"have {b['choice_steps_gold']} steps where both SHIFT and REDUCE are valid"],
                          ", with a transition head (fresh weights)")
    lines += ["", f"  {'':<34} {'gold':>8} {'predicted':>10}"]
    lines += [line for name in frameworks.FRAMEWORKS if name in result
              for line in explainer(name, "parse view").format_explain_parse(result[name])]
    return "\n".join(lines)


# --levels: the host-scheduled levels of the batch, and the loop each framework runs over them
VARIANTS = {"tracker": "with the tracker", "no_tracker": "without the tracker"}


def explain_levels(args: argparse.Namespace) -> dict:
    """The figures of ``explain --levels``: the level schedule with and without tracker, and each Runner's."""
    batches, config = setup(args)
    result = result_header(args, batches, config)
    configs = {"tracker": config} if config.tracker_dim else {}  # --tracker-dim 0: the view without it alone
    configs["no_tracker"] = dataclasses.replace(config, tracker_dim=0)
    transitions = sentences_transitions(batches.main)
    result["schedules"] = {}
    for key in configs:  # the batch's schedule (shared.levels, every level exactly as wide as its nodes)
        sched = schedule(transitions, batches.main.num_tokens, key == "tracker")
        result["schedules"][key] = {"levels": sched.n_levels, "steps": int(transitions.shape[1]),
                                    "nodes": [lv.used for lv in sched.levels],
                                    "active": [lv.active_used for lv in sched.levels] if key == "tracker" else []}
    variants = {key: (c, init_params(c, seed=args.seed)) for key, c in configs.items()}
    found = {fw.name: dict(impl.options) for fw in frameworks.FRAMEWORKS_BY_NAME.values()  # its levels Runner's
             for impl in fw.implementations if impl.family == frameworks.LEVELS}  # options, in the registry's order
    for name in chosen(args, "--levels", found, "the frameworks with host-scheduled levels"):
        if not frameworks.installed(name):
            result[name] = {"framework_version": "not installed", "installed": False}
            continue
        result[name] = explainer(name, "levels view").explain_levels(batches.main, variants, found[name])
    return result


def format_levels(result: dict) -> str:
    lines = format_header(result)
    names = [name for name in frameworks.FRAMEWORKS if name in result]
    ran = [name for name in names if result[name].get("installed", True)]
    for key in [key for key in VARIANTS if key in result["schedules"]]:
        s, level_is = result["schedules"][key], "a transition step" if key == "tracker" else "a tree height"
        lines += ["", f"schedule {VARIANTS[key]}: {s['levels']} levels for T={s['steps']} steps "
                      f"(a level is {level_is}), {sum(s['nodes'])} Reduce nodes"]
        for name in ran:
            r = result[name][key]
            lines.append(f"  {name} runs {r['levels_run']} levels, {sum(r['reduce_widths'])} Reduce rows, "
                         f"{r['padded_pct']:.1f}% of them padding"
                         + (f", {sum(r['tracker_rows'])} tracker rows" if r["tracker_rows"] else ""))
        halves = [("nodes", "reduce_widths"), ("active", "tracker_rows")][:2 if key == "tracker" else 1]
        lines += ["  Reduce width per level" + ("  |  tracker rows per level" if key == "tracker" else ""),
                  f"  {'level':>5} " + "  |".join(" ".join(f"{c:>10}" for c in [own] + ran) for own, _ in halves)]
        for level in range(max([s["levels"]] + [result[name][key]["levels_run"] for name in ran])):
            lines.append(f"  {level:>5} " + "  |".join(" ".join(f"{c:>10}" for c in [_cell(s[own], level)] + [
                _cell(result[name][key][run], level) for name in ran]) for own, run in halves))
    lines += ["", "the loop body each framework runs over the levels (encode)"]
    for name in names:
        if name not in ran:
            lines.append(f"{name}: not installed")
            continue
        lines += explainer(name, "levels view").format_explain_levels(result[name])
    return "\n".join(lines)


def _cell(values: list, level: int) -> str:
    """A level's figure, or "-" past the levels a schedule or a runner has."""
    return str(values[level]) if level < len(values) else "-"


# --bad-input: what each framework does with an invalid transition sequence or token id
BAD_INPUTS = {"transitions": "the first premise's first REDUCE moved to step 1 (a REDUCE with one item on the stack)",
              "token": "the first premise's first token id set to V (outside the vocabulary)"}


def _where(err: BaseException) -> str | None:
    """The innermost frame of the project's own code in the traceback of ``err`` (or its cause); None if none."""
    while err.__cause__ is not None or (err.__context__ is not None and err.__suppress_context__):
        err = err.__cause__ or err.__context__
    f = next((f for f in reversed(traceback.extract_tb(err.__traceback__)) if _own_code(f.filename)), None)
    return None if f is None else f"{Path(f.filename).resolve().relative_to(ROOT)}, in {f.name}: {f.line}"


def _own_code(filename: str) -> bool:
    """A file of the project's packages (not a library), and not explain's own code."""
    path = Path(filename).resolve()
    if not path.is_relative_to(ROOT):
        return False
    framework_packages = tuple(frameworks.framework(name).package for name in frameworks.FRAMEWORKS)
    explain = (ROOT / "bench" / "explain", ROOT / "shared" / "explaining.py") + tuple(
        ROOT / package / "explain.py" for package in framework_packages)
    return (path.relative_to(ROOT).parts[0] in ("shared", "bench") + framework_packages
            and not any(path.is_relative_to(e) for e in explain))


def explain_bad_input(args: argparse.Namespace) -> dict:
    """The figures of ``explain --bad-input``: what each framework's Runner does with the broken batch."""
    batches, config = setup(args)
    params = init_params(config, seed=args.seed)
    # The batch with one invalid entry in its first premise (BAD_INPUTS; "transitions" keeps counts right).
    arrays = {name: array.copy() for name, array in batches.main.to_dict().items()}
    if args.bad_input == "transitions":
        row = list(arrays["premise_transitions"][0])
        if REDUCE not in row:
            raise ValueError("the first premise has one word; pick a longer sentence for --bad-input transitions")
        row.insert(1, row.pop(row.index(REDUCE)))
        arrays["premise_transitions"][0] = row
    else:  # "token" (--bad-input's choices are the two kinds)
        arrays["premise_tokens"][0, 0] = config.vocab_size
    bad = PairBatch(**arrays, pair_ids=batches.main.pair_ids)
    result = {"bad_input": {"kind": args.bad_input, "what": BAD_INPUTS[args.bad_input],
                            "first_premise": [int(op) for op in bad.premise_transitions[0]]}}
    for name in chosen(args, "--bad-input"):
        result[name] = explainer(name, "bad-input view").explain_bad_input(config, params, bad, _where)
    return result


def format_bad_input(result: dict) -> str:
    bad = result["bad_input"]
    lines = [f"bad input: {bad['what']}"]
    if bad["kind"] == "transitions":
        ops = " ".join(TRANSITION_NAMES[op][0] if op != PAD else "." for op in bad["first_premise"])
        lines.append(f"  first premise: {ops}   (S SHIFT, R REDUCE, . PAD)")

    def outcome(r: dict, indent: str) -> list[str]:
        where = f"at {r['where']}" if r.get("where") else \
            "(no frame of your code in the traceback: the error comes from the runtime)"
        return [f"{indent}{r['error']}", indent + where] if "error" in r else []

    for r, name in ((result[name], name) for name in frameworks.FRAMEWORKS if name in result):
        lines += ["", f"{name}: {r['outcome']}"] + outcome(r, "  ")
        if "graph" in r:
            lines += [f"  the traced graph called without the check: {r['graph']['outcome']}"]
            lines += outcome(r["graph"], "    ")
    return "\n".join(lines)
