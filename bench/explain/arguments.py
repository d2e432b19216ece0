"""The flags of ``python -m bench explain``, the command that reproduces a result, and the batch it looks at with the
variants its recompilation check feeds."""

from __future__ import annotations

import argparse
import functools
import os
import platform
from dataclasses import dataclass

import numpy as np

from bench import frameworks
from bench.config import add_size_arguments, model_config
from shared.batching import PairBatch, make_pair_batch, sentences_transitions
from shared.params import ModelConfig, init_params
from shared.snli import SAMPLE_PATH, Pair, read_snli
from shared.synthetic import random_transitions, shaped_pairs
from shared.transitions import PAD, REDUCE, SHIFT, Sentence, plain_transitions
from shared.vocab import Vocabulary

# The guides whose excerpts and figures --check-guide keeps true (bench check), in reading order.
GUIDES = ("docs/static-vs-dynamic.md", "docs/algorithm-or-framework.md", "docs/decided-graphs.md",
          "docs/autobatching.md", "docs/data-parallel.md")

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
    p.add_argument("--check-guide", action="store_true",
                   help="compare the guide's excerpts and figures with the code and fresh runs; exit 1 on drift")
    p.add_argument("--sync-guide", action="store_true",
                   help="rewrite the guide's excerpts from the code and its figures from fresh runs")
    p.add_argument("--guide", default=None,
                   help=f"the guide for --check-guide/--sync-guide [default: every guide: {', '.join(GUIDES)}]")


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The explain flags alone (``argv`` without ``python -m bench explain``)."""
    p = argparse.ArgumentParser(prog=COMMAND)
    add_arguments(p)
    return p.parse_args(argv)


def chosen(args: argparse.Namespace) -> tuple[str, ...]:
    """The frameworks (or the variant) ``--framework`` asks for, in the order the output shows them."""
    return frameworks.FRAMEWORKS if args.framework == "all" else (args.framework,)


def chosen_frameworks(args: argparse.Namespace, view: str) -> tuple[str, ...]:
    """:func:`chosen` for a view that shows frameworks, not variants (``view``: its flag)."""
    names = chosen(args)
    if any(name not in frameworks.FRAMEWORKS for name in names):
        raise ValueError(f"{view} shows frameworks, not variants; choose from all, {', '.join(frameworks.FRAMEWORKS)}")
    return names


def command_line(args: argparse.Namespace) -> str:
    """The command that reproduces ``args``' figures (flags that differ from the defaults)."""
    defaults = parse_args([])
    flags = []
    for flag in ("framework", "batch_size", "shape", "length", "data_seed", "seed", "size", "embed_dim",
                 "hidden_dim", "tracker_dim", "mlp_dim", "mlp_layers", "transition_head", "parse", "levels"):
        value = getattr(args, flag)
        if value is True:
            flags.append(f"--{flag.replace('_', '-')}")
        elif value != getattr(defaults, flag):
            flags.append(f"--{flag.replace('_', '-')} {value}")
    return " ".join([COMMAND] + flags)


def result_header(args: argparse.Namespace, batch_summary: dict, config) -> dict:
    """The first keys of every explain result: the command, the machine, the
    batch (``batches.summary``) and the model's sizes."""
    return {
        "command": command_line(args),
        "machine": f"{platform.machine()} CPU, {os.cpu_count()} cores, Python {platform.python_version()}",
        "batch": batch_summary,
        "model": {k: getattr(config, k) for k in ("vocab_size", "embed_dim", "hidden_dim", "tracker_dim",
                                                  "mlp_dim", "mlp_layers")},
    }


def format_header(result: dict, batch_lines: list[str] | None = None, model_note: str = "") -> list[str]:
    """The first lines of every explain text: the batch (``batch_lines``, by default what it is and its
    transitions), the model (with ``model_note``), the versions of the frameworks present, the machine."""
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
    for shape in OTHER_SHAPES:
        rng = np.random.default_rng(args.data_seed + 1)
        other = [Pair(_reshape(p.premise, shape, rng), _reshape(p.hypothesis, shape, rng), p.label, p.pair_id)
                 for p in pairs]
        reshaped[shape] = make_pair_batch(other, vocab, num_tokens=n)
    other_trees = "random" if args.shape in ("left", "right", "balanced") else "left"
    return Batches(main=make_pair_batch(pairs, vocab, num_tokens=n), reshaped=reshaped,
                   padded=make_pair_batch(pairs, vocab, num_tokens=n + EXTRA_PADDING),
                   other_trees=other_trees, vocab_size=len(vocab), source=source, trees=trees)


def setup(args: argparse.Namespace) -> tuple[Batches, ModelConfig, dict]:
    """The batch and its variants, the model ``args`` describe and its initial weights."""
    batches = make_batches(args)
    config = model_config(args, batches.vocab_size, lowercase=True)
    return batches, config, init_params(config, seed=args.seed)


def summary(batches: Batches) -> dict:
    """The figures of the batch itself (the first lines of the output)."""
    b = batches.main
    transitions = sentences_transitions(b)
    return {
        "source": batches.source,
        "trees": batches.trees,
        "pairs": b.size,
        "sentences": 2 * b.size,
        "num_tokens": b.num_tokens,
        "num_steps": b.num_steps,
        "shift": int(np.count_nonzero(transitions == SHIFT)),
        "reduce": int(np.count_nonzero(transitions == REDUCE)),
        "pad": int(np.count_nonzero(transitions == PAD)),
        "other_trees": batches.other_trees,
        "padded_num_tokens": batches.padded.num_tokens,
        "padded_num_steps": batches.padded.num_steps,
    }
