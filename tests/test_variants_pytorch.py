"""The PyTorch variants of the algorithm matrix, beyond the contract.

``pytorch-masked`` runs the JAX algorithm (padded arrays, pointers, masks;
impl_pytorch/masked.py) in PyTorch eager; ``pytorch-compiled`` runs it under
torch.compile (impl_pytorch/compiled.py), and ``pytorch-cudagraphs`` the
same with Inductor's CUDA graphs (mode "reduce-overhead"); ``pytorch-levels``
runs the batch's gold trees level by level on a schedule made on the host
(impl_pytorch/levels.py). Their agreement with the float64
reference is in test_contract.py, where the compiled variant runs with the
``aot_eager`` backend (tests/helpers.py: TEST_OPTIONS): TorchDynamo captures
the same step graphs and AOTAutograd differentiates them, without the
Inductor build's tens of seconds per program and shape; one test there runs
pytorch-compiled's Inductor build, as the benchmark times it, on one tiny
shape. Here: the registry entries, the option errors, the family modules
each runner loads, that the decision stays inside the captured graph, the
Inductor build with CUDA graphs on one tiny shape (SPINN_TEST_DEVICE=gpu
runs it on a GPU, where the graphs are recorded and replayed; on a CPU
Inductor runs every graph without one). What the levels runner refuses,
records and explains, and its hand-written table gradient, are with the
levels family's other runners in test_levels_models.py.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from bench import frameworks
from impl_pytorch.runner import Runner
from shared import reference
from shared.batching import make_pair_batch
from shared.compare import ENCODING_TOL_F32, GRAD_REL_TOL_F32, LOGITS_TOL_F32, max_abs_err
from shared.params import init_params
from tests.helpers import head_config, head_params, make_runner, small_config_for, uniforms


def test_registered_as_opt_in_variants():
    assert frameworks.IMPLEMENTATIONS["pytorch-masked"] == ("pytorch", {"family": "masked"})
    assert frameworks.IMPLEMENTATIONS["pytorch-compiled"] == ("pytorch", {"family": "masked", "compile": True})
    assert frameworks.IMPLEMENTATIONS["pytorch-cudagraphs"] == (
        "pytorch", {"family": "masked", "compile": True, "compile_mode": "reduce-overhead"})
    assert frameworks.IMPLEMENTATIONS["pytorch-levels"] == ("pytorch", {"family": "levels"})
    assert {"pytorch-masked", "pytorch-compiled", "pytorch-cudagraphs", "pytorch-levels"} <= frameworks.OPT_IN
    assert frameworks.matrix()[frameworks.LEVELS, "pytorch"] == ["pytorch-levels"]


MODULES = """
import json, sys
from impl_pytorch.runner import Runner
from shared.params import ModelConfig, init_params
loaded = sorted(m.split(".")[1] for m in sys.modules if m.startswith("impl_pytorch."))
config = ModelConfig(vocab_size=20, embed_dim=4, hidden_dim=4, tracker_dim=3, mlp_dim=4, mlp_layers=1)
Runner(init_params(config, seed=0), config, **OPTIONS)
print(json.dumps([loaded, sorted(m.split(".")[1] for m in sys.modules if m.startswith("impl_pytorch."))]))
"""


@pytest.mark.parametrize("options,family", [({}, "lists"), ({"family": "masked"}, "masked"),
                                            ({"family": "levels"}, "levels"),
                                            ({"family": "masked", "compile": "aot_eager"}, "masked")])
def test_the_runner_loads_only_the_family_it_runs(options, family):
    """Importing runner.py loads no family module, nor compiled.py or
    replicas.py; building a runner loads its own family alone, and
    compiled.py only with compile=True (a fresh process: this one has loaded them all)."""
    out = subprocess.run([sys.executable, "-c", MODULES.replace("OPTIONS", repr(options))], capture_output=True,
                         text=True, check=True).stdout
    at_import, built = (set(names) for names in json.loads(out))
    optional = {"lists", "masked", "levels", "compiled", "replicas", "cells"}
    assert not at_import & optional
    assert built & optional == {"cells", family} | ({"compiled"} if "compile" in options else set())


def test_option_errors_are_clear(small_config):
    params = init_params(small_config, seed=0)
    with pytest.raises(ValueError, match="compile=True needs family='masked'"):
        Runner(params, small_config, compile=True)
    with pytest.raises(ValueError, match="compile_mode needs compile=True"):
        Runner(params, small_config, family="masked", compile_mode="reduce-overhead")
    with pytest.raises(ValueError, match="needs the inductor backend"):
        Runner(params, small_config, family="masked", compile="aot_eager", compile_mode="reduce-overhead")
    with pytest.raises(ValueError, match="unknown family 'stacks'"):
        Runner(params, small_config, family="stacks")
    with pytest.raises(TypeError, match="known: family, compile"):
        Runner(params, small_config, layout="thin")


@pytest.mark.parametrize("mode", ["gold", "predicted", "sampled"])
def test_compiled_parse_keeps_the_decision_in_the_graph(mode, device, vocab, small_batch):
    """Dynamo captures the parse step with the decision inside: a host read
    (.item(), .tolist(), a Python `if` on a tensor) would be a graph break.
    Dynamo's caches are cleared first: a parse an earlier test compiled in this
    process would otherwise be reused, and nothing would be captured here."""
    import torch

    torch._dynamo.reset()
    config = head_config(len(vocab))
    runner = make_runner("pytorch-compiled", head_params(config, seed=5), config, dtype="float64", device=device)
    runner.parse(small_batch, mode, uniforms=uniforms(small_batch) if mode == "sampled" else None)
    stats = runner.compile_stats(f"parse:{mode}")
    assert stats.traces >= 1 and stats.graph_breaks == 0
    assert runner.last_host_syncs == 0


def test_cudagraphs_variant_agrees_and_says_where_it_ran_without_graphs(device, vocab, sample_pairs):
    """pytorch-cudagraphs as the benchmark builds it (Inductor, mode
    "reduce-overhead"), float32 on one tiny shape: two batches in a row (the
    second replays what the first recorded), the encodings and the gradients
    against the reference, then two training steps. On a GPU no graph runs
    without its CUDA graph; on a CPU every one does, and the stats say so."""
    config = small_config_for(len(vocab), tracker_dim=3, mlp_layers=1)
    params = init_params(config, seed=12, dtype=np.float32)
    runner = frameworks.make_runner("pytorch-cudagraphs", params, config, dtype="float32", device=device)
    short = [p for p in sample_pairs if max(len(p.premise), len(p.hypothesis)) <= 8 and p.label >= 0]
    first, second = (make_pair_batch(short[k:k + 2], vocab, num_tokens=8) for k in (0, 2))
    for batch in (first, second, first):
        premise, hypothesis, logits = runner.encode(batch)
        ref = reference.forward(params, config, batch)
        assert max_abs_err(premise, ref.premise) <= ENCODING_TOL_F32
        assert max_abs_err(logits, ref.logits) <= LOGITS_TOL_F32
    for batch in (first, second):
        loss, grads = runner.loss_and_grads(batch)
        ref_loss, ref_grads = reference.loss_and_grads(params, config, batch)
        assert abs(loss - ref_loss) <= LOGITS_TOL_F32
        for name, grad in ref_grads.items():
            scale = max(np.abs(grad).max(), 1e-6)
            assert np.abs(grads[name] - grad).max() / scale <= GRAD_REL_TOL_F32, name
    runner.set_optimizer("sgd", 0.1)
    losses = [runner.train_step(first) for _ in range(2)]
    assert all(np.isfinite(losses)) and losses[1] < losses[0]
    stats = runner.compile_stats()
    assert stats.traces >= 2 and stats.graph_breaks == 0
    if device == "gpu":
        assert stats.cudagraph_skips == 0
    else:
        assert stats.cudagraph_skips >= stats.traces
