"""``python -m bench conform IMPLEMENTATION...``: does an implementation agree with the float64 reference?
What it checks and prints: docs/runner-interface.md, "bench conform NAME..."."""

from __future__ import annotations

import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench import frameworks
from bench.config import add_device_argument, quiet_frameworks
from bench.render.table import table
from shared import parsing, reference
from shared.batching import make_pair_batch
from shared.compare import grad_rel_errs, max_abs_err, tolerances
from shared.contract import HEAD_KERNEL
from shared.params import ModelConfig, init_params, load_params, save_params
from shared.snli import SAMPLE_PATH, read_snli
from shared.vocab import Vocabulary

BASELINE = 0.25  # REINFORCE's baseline in the check (any value: the reference takes the same)


@dataclass
class Check:
    check: str
    error: float | None  # the worst error found (None: nothing to measure)
    tolerance: float | None
    result: str  # "PASS", "FAIL" or "refused by declaration"
    note: str = ""


def _refusal(capability: str, call) -> Check:
    """A capability the runner declares unsupported: it must refuse in one line, naming it."""
    try:
        call()
    except NotImplementedError as err:
        ok = f"no {capability}: " in str(err) and "\n" not in str(err)
        return Check(capability, None, None, "refused by declaration" if ok else "FAIL",
                     "" if ok else f"refused without saying 'no {capability}: why' in one line: {err}")
    return Check(capability, None, None, "FAIL", "declared unsupported, yet it ran")


def _within(name: str, error: float, tolerance: float, note: str = "") -> Check:
    return Check(name, error, tolerance, "PASS" if error <= tolerance else "FAIL", note)


def conform(name: str, device: str = "cpu") -> list[Check]:
    """Every check of one implementation (a registered name), in the table's order."""
    pairs, _ = read_snli(SAMPLE_PATH)  # the sample's pairs, a small model with a head of mixed choices, 12 pairs
    vocab = Vocabulary.from_pairs(pairs, lowercase=True)
    config = ModelConfig(vocab_size=len(vocab), embed_dim=6, hidden_dim=5, tracker_dim=4, mlp_dim=7, mlp_layers=1,
                         transition_head=True)
    batch = make_pair_batch(pairs[:12], vocab)
    runner_class = frameworks.runner_class(frameworks.resolve(name)[0])
    dtype = "float64" if runner_class.supports("float64") else "float32"
    enc_tol, logit_tol, grad_tol, logprob_tol = tolerances(dtype)
    params = init_params(config, seed=1, dtype=np.dtype(dtype))
    params[HEAD_KERNEL] = (params[HEAD_KERNEL] * 8.0).astype(dtype)
    runner = frameworks.make_runner(name, params, config, dtype=dtype, device=device)
    checks = []

    premise, hypothesis, logits = runner.encode(batch)
    ref = reference.forward(params, config, batch)
    checks.append(_within(f"encodings ({dtype})", max(max_abs_err(premise, ref.premise),
                                                      max_abs_err(hypothesis, ref.hypothesis)), enc_tol))
    checks.append(_within(f"logits ({dtype})", max_abs_err(logits, ref.logits), logit_tol))
    _, grads = runner.loss_and_grads(batch)
    _, ref_grads = reference.loss_and_grads(params, config, batch)
    errors = grad_rel_errs(grads, ref_grads)
    worst = max(errors, key=errors.get)
    checks.append(_within("gradients (relative, every parameter)", errors[worst], grad_tol, f"worst: {worst}"))

    u = parsing.uniforms_for(batch, rows=list(range(batch.size)), seed=3)  # the sampled parses' and REINFORCE's
    for mode in ("predicted", "sampled"):
        uniforms = u if mode == "sampled" else None
        if not runner.supports(f"{mode} parse"):
            checks.append(_refusal(f"{mode} parse", lambda: runner.parse(batch, mode, uniforms=uniforms)))
            continue
        parsed = runner.parse(batch, mode, uniforms=uniforms)
        want = reference.parse(params, config, batch, mode, uniforms=uniforms)
        differ = sum(int(np.sum(getattr(parsed, f"{side}_transitions") != getattr(want, f"{side}_transitions")))
                     for side in ("premise", "hypothesis"))

        def worst(suffix: str) -> float:  # the larger error of the two sentences' arrays named so
            return max(max_abs_err(getattr(parsed, side + suffix), getattr(want, side + suffix))
                       for side in ("premise", "hypothesis"))

        checks.append(_within(f"{mode} parse: transitions (steps that differ)", differ, 0))
        checks.append(_within(f"{mode} parse: encodings", worst(""), enc_tol))
        if mode == "sampled":
            checks.append(_within("sampled parse: log-probabilities", worst("_logprob"), logprob_tol))

    if runner.supports("reinforce"):
        _, grads, _ = runner.reinforce_loss_and_grads(batch, u, BASELINE)
        _, ref_grads, _ = reference.reinforce_loss_and_grads(params, config, batch, u, BASELINE,
                                                             reinforce_weight=runner.reinforce_weight,
                                                             entropy_weight=runner.entropy_weight)
        errors = grad_rel_errs(grads, ref_grads)
        worst = max(errors, key=errors.get)
        checks.append(_within("REINFORCE gradients (relative)", errors[worst], grad_tol, f"worst: {worst}"))
    else:
        checks.append(_refusal("reinforce", lambda: runner.reinforce_loss_and_grads(batch, u, BASELINE)))

    with tempfile.TemporaryDirectory(prefix="spinn-conform-") as folder:
        path = Path(folder) / "model.npz"
        save_params(path, runner.get_params(), config, vocab.to_array())
        loaded = load_params(path)
        again = frameworks.make_runner(name, loaded.params, loaded.config, dtype=dtype, device=device)
        error = max(max_abs_err(a, b) for a, b in zip(again.encode(batch), (premise, hypothesis, logits)))
    checks.append(_within("canonical parameter file round trip (encodings)", error, 0.0))

    wider = batch.num_tokens + 5  # more token slots, and steps past the last 2N - 1
    together = runner.encode(make_pair_batch(pairs[:12], vocab, num_tokens=wider, num_steps=2 * wider + 8))
    error = max(max_abs_err(a[0], t[k]) for k in (0, 5, 11)  # pairs 0, 5 and 11 each alone
                for a, t in zip(runner.encode(make_pair_batch([pairs[k]], vocab)), together))
    checks.append(_within("a pair alone equals it inside a batch", error, enc_tol))
    return checks


def format_checks(name: str, checks: list[Check]) -> str:
    return f"{name}:\n\n" + table(["check", "worst error", "tolerance", "result"], [
        [c.check, "-" if c.error is None else f"{c.error:.1e}" if isinstance(c.error, float) else str(c.error),
         "-" if c.tolerance is None else f"{c.tolerance:g}", c.result + (f": {c.note}" if c.note else "")]
        for c in checks])


def register(sub) -> None:
    p = sub.add_parser("conform", help="check implementations against the float64 reference: values, gradients, "
                                       "parses, refusals, the parameter file, batch independence",
                       description=__doc__.splitlines()[0])
    p.add_argument("implementations", nargs="+", metavar="IMPLEMENTATION",
                   help=f"registered names ({', '.join(frameworks.IMPLEMENTATIONS)}, and any plugged in)")
    add_device_argument(p)
    p.set_defaults(func=cmd_conform)


def cmd_conform(args) -> int:
    for name in args.implementations:
        frameworks.implementation(name)  # a ValueError in one line for an unknown name, before anything runs
    quiet_frameworks("float64", [frameworks.resolve(n)[0] for n in args.implementations])
    failed = []
    for name in args.implementations:
        checks = conform(name, args.device)
        print(format_checks(name, checks) + "\n")
        failed += [f"{name}: {c.check} ({c.error:.1e} > {c.tolerance:g})" if c.error is not None else
                   f"{name}: {c.check} ({c.note})" for c in checks if c.result == "FAIL"]
    for line in failed:
        print(f"FAIL {line}", file=sys.stderr)
    print(f"conform: {len(args.implementations) - len({f.split(':')[0] for f in failed})} of "
          f"{len(args.implementations)} implementations agree with the float64 reference", file=sys.stderr)
    return 1 if failed else 0
