"""The agreement check: a worker's encodings, logits, gradients and predicted parses against the float64 reference on
the same weights, before anything is timed, and each pair of implementations against each other once all have run."""

from __future__ import annotations

from itertools import combinations
from pathlib import Path

import numpy as np

from shared.files import written_aside


def check_agreement(runner, pairs, vocab, config, params, dtype: str, out_dir: Path, name: str, *, parse_modes=(),
                    shared: Path) -> dict:
    """``runner`` against the float64 reference on the same weights: encodings and logits, gradients on the cheapest
    four pairs, and the predicted parses; its outputs kept for the pairwise comparison. The reference's outputs are
    computed once per run: read from ``shared`` where an earlier worker wrote them (the same weights and pairs)."""
    from shared import parse_metrics, reference
    from shared.batching import make_pair_batch, pair_length
    from shared.compare import ENCODING_TOL_F32, GRAD_REL_TOL_F32, LOGITS_TOL_F32, grad_rel_errs, max_abs_err

    batch = make_pair_batch(pairs, vocab)
    premise, hypothesis, logits = runner.encode(batch)
    grad_batch = batch.select(np.argsort([pair_length(p) for p in pairs])[:4])  # the cheapest four
    _, grads = runner.loss_and_grads(grad_batch)
    predicted = "predicted" in parse_modes  # sampled parses follow the shared uniforms: their agreement is a test's
    if shared.exists():
        with np.load(shared) as saved:
            ref = dict(saved)
    else:  # encodings, logits, gradients (``grad.NAME``) and, with ``predicted``, predicted parses (``parse.*``)
        out = reference.forward(params, config, batch)
        _, ref_grads = reference.loss_and_grads(params, config, grad_batch)
        ref = {"premise": out.premise, "hypothesis": out.hypothesis, "logits": out.logits,
               **{f"grad.{k}": v for k, v in ref_grads.items()}}
        if predicted:
            parses = reference.parse(params, config, batch, "predicted")
            ref.update({"parse.premise": parses.premise_transitions, "parse.hypothesis": parses.hypothesis_transitions,
                        "parse.logits": parses.logits})
        with written_aside(shared) as tmp, open(tmp, "wb") as file:
            np.savez(file, **ref)
    result = {
        "max_abs_err_encoding": max(max_abs_err(premise, ref["premise"]), max_abs_err(hypothesis, ref["hypothesis"])),
        "max_abs_err_logits": max_abs_err(logits, ref["logits"]),
        "max_rel_err_grads": max(grad_rel_errs(grads, {k[5:]: v for k, v in ref.items() if k[:5] == "grad."}).values()),
        "agreement_pairs": len(pairs),
    }
    if predicted:
        mine = runner.parse(batch, "predicted")
        result["parse_agreement"] = float(np.mean([
            parse_metrics.parse_agreement(mine.premise_transitions, ref["parse.premise"]),
            parse_metrics.parse_agreement(mine.hypothesis_transitions, ref["parse.hypothesis"])]))
        result["max_abs_err_logits_predicted"] = max_abs_err(mine.logits, ref["parse.logits"])
    if dtype == "float32":
        result["agreement_ok"] = bool(result["max_abs_err_encoding"] <= ENCODING_TOL_F32
                                      and result["max_abs_err_logits"] <= LOGITS_TOL_F32
                                      and result["max_rel_err_grads"] <= GRAD_REL_TOL_F32)
    else:
        result["agreement_ok"] = bool(result["max_abs_err_encoding"] <= 1e-10 and result["max_abs_err_logits"] <= 1e-10)
    agreement_dir = Path(out_dir) / "agreement"
    agreement_dir.mkdir(parents=True, exist_ok=True)
    np.savez(agreement_dir / f"{name}.npz", premise=premise, hypothesis=hypothesis, logits=logits,
             pair_id=np.array(batch.pair_ids))
    return result


def pairwise_agreement(out_dir: Path, names: list[str]) -> dict:
    """Max abs differences of encodings and logits between implementations."""
    paths = {name: Path(out_dir) / "agreement" / f"{name}.npz" for name in names}
    loaded = {name: np.load(path) for name, path in sorted(paths.items()) if path.exists()}
    diff = lambda a, b, key: float(np.abs(loaded[a][key] - loaded[b][key]).max())  # noqa: E731
    return {f"{a} vs {b}": {"max_abs_diff_encoding": max(diff(a, b, "premise"), diff(a, b, "hypothesis")),
                            "max_abs_diff_logits": diff(a, b, "logits")} for a, b in combinations(loaded, 2)}
