"""Canonical weights (docs/spec.md §4) <-> the Flax params pytree.

Flax's ``nn.Dense`` stores its kernel as ``[in, out]`` (``y = x @ kernel``),
the canonical layout, and the Tracker declares its weights under their
canonical names, so the conversion is a rename and nothing else:

    canonical                  Flax path under variables["params"]
    embed.embedding            embed/embedding                 (the classifier's: SPINN takes the leaves)
    projection.{kernel,bias}   projection/{kernel,bias}
    tracker.kernel_input       spinn/tracker/kernel_input      (D > 0)
    tracker.kernel_hidden      spinn/tracker/kernel_hidden     (D > 0)
    tracker.bias               spinn/tracker/bias              (D > 0)
    reduce.left.{kernel,bias}  spinn/reduce/left/{kernel,bias}
    reduce.right.kernel        spinn/reduce/right/kernel
    reduce.track.kernel        spinn/reduce/track/kernel       (D > 0)
    mlp.{k}.{kernel,bias}      mlp_{k}/{kernel,bias}           (Flax names list members name_k)
    output.{kernel,bias}       output/{kernel,bias}
    tracker.transition.{kernel,bias}  spinn/tracker/transition/{kernel,bias}  (transition_head; §7)

Transposed: none. Split or fused: none. (PyTorch, which stores [out, in],
transposes every kernel; see impl_pytorch/convert.py.)

The model is train.Model, the Flax module and its parameters: ``from_canonical``
fills a model's parameters (placed where the model's tree says, params.abstract's
for a model not yet filled), ``to_canonical`` and ``grads_to_canonical`` read
a tree out. Both directions check the names and shapes against ``shared.params``
and against the tree the model's module makes (params.abstract), so a renamed
module or a changed shape fails loudly here instead of training the wrong weights.
"""

from __future__ import annotations

from typing import Any, Mapping

import jax
import numpy as np

from shared.params import ModelConfig, ParamError, check_params, param_shapes

from .params import abstract


def name_map(config: ModelConfig) -> dict[str, tuple[str, ...]]:
    """Canonical name -> path in ``variables["params"]``, in canonical order."""
    paths: dict[str, tuple[str, ...]] = {
        "embed.embedding": ("embed", "embedding"),
        "projection.kernel": ("projection", "kernel"),
        "projection.bias": ("projection", "bias"),
    }
    if config.tracker_dim > 0:
        for leaf in ("kernel_input", "kernel_hidden", "bias"):
            paths[f"tracker.{leaf}"] = ("spinn", "tracker", leaf)
    paths["reduce.left.kernel"] = ("spinn", "reduce", "left", "kernel")
    paths["reduce.left.bias"] = ("spinn", "reduce", "left", "bias")
    paths["reduce.right.kernel"] = ("spinn", "reduce", "right", "kernel")
    if config.tracker_dim > 0:
        paths["reduce.track.kernel"] = ("spinn", "reduce", "track", "kernel")
    for k in range(config.mlp_layers):
        paths[f"mlp.{k}.kernel"] = (f"mlp_{k}", "kernel")
        paths[f"mlp.{k}.bias"] = (f"mlp_{k}", "bias")
    paths["output.kernel"] = ("output", "kernel")
    paths["output.bias"] = ("output", "bias")
    if config.transition_head:  # last, as in the canonical table
        paths["tracker.transition.kernel"] = ("spinn", "tracker", "transition", "kernel")
        paths["tracker.transition.bias"] = ("spinn", "tracker", "transition", "bias")
    assert list(paths) == list(param_shapes(config)), "name map out of step with shared.params"
    return paths


def resolve_dtype(dtype) -> np.dtype:
    """'float32' / 'float64' (or a NumPy dtype) -> np.dtype, checking that JAX can hold it."""
    dtype = np.dtype(dtype)
    if dtype not in (np.float32, np.float64):
        raise ValueError(f"dtype must be float32 or float64, got {dtype}")
    if dtype == np.float64 and not jax.config.jax_enable_x64:
        raise ValueError(
            "float64 needs JAX's 64-bit mode, which is off: set JAX_ENABLE_X64=1 in the environment "
            "before starting Python, or call jax.config.update('jax_enable_x64', True) before "
            "creating any arrays (JAX would otherwise silently compute in float32)")
    return dtype


def _flatten(tree: Mapping) -> dict[tuple[str, ...], Any]:
    flat = jax.tree_util.tree_flatten_with_path(tree)[0]
    return {tuple(k.key for k in path): leaf for path, leaf in flat}


def from_canonical(params: Mapping[str, np.ndarray], model):
    """Canonical dict -> ``model`` (a train.Model) with those parameters, of its module's dtype, each
    where ``model.params`` has it (a jax.Array or a jax.ShapeDtypeStruct with a sharding, as
    params.abstract(module, device) makes them), or, where that says nothing, on JAX's default device.
    Returns the new model."""
    module = model.module
    config = module.config
    dtype = resolve_dtype(module.dtype)
    check_params(params, config)  # names and shapes, with a message naming the entry
    paths = name_map(config)
    expected = _flatten(abstract(module))
    where = _flatten(model.params) if model.params is not None else {}
    assert len(expected) == len(paths) == len(params), (len(expected), len(paths), len(params))
    tree: dict[str, Any] = {}
    for name, path in paths.items():
        value = np.asarray(params[name], dtype=dtype)  # no copy when the dtype already matches
        want = expected[path]
        assert (tuple(want.shape), np.dtype(want.dtype)) == (value.shape, dtype), (name, path, want, value.shape)
        node = tree
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = jax.device_put(value, getattr(where.get(path), "sharding", None))
    return model.replace(params=tree)


def _canonical(tree: Mapping, config: ModelConfig) -> dict[str, np.ndarray]:
    """A tree shaped like the parameters -> canonical name -> NumPy array, checked."""
    flat = _flatten(tree)
    paths = name_map(config)
    unknown = set(flat) - set(paths.values())
    if unknown:
        raise ParamError(f"Flax weights with no canonical name: {sorted('/'.join(p) for p in unknown)}")
    out = {}
    for name, path in paths.items():
        if path not in flat:
            raise ParamError(f"Flax weights lack {'/'.join(path)} (canonical {name!r})")
        # A copy: on the CPU a NumPy view would share the buffer that the next
        # (donating) training step may overwrite in place.
        out[name] = np.array(jax.device_get(flat[path]), copy=True)
    check_params(out, config)
    return out


def to_canonical(model) -> dict[str, np.ndarray]:
    """``model`` (a train.Model) -> its parameters, canonical name -> NumPy array (docs/spec.md §4 names
    and shapes)."""
    return _canonical(model.params, model.module.config)


def grads_to_canonical(model, grads: Mapping) -> dict[str, np.ndarray]:
    """Gradients -> canonical name -> NumPy array. ``jax.grad`` returns a pytree
    shaped like ``model.params``, so this reads it as ``to_canonical`` reads the parameters."""
    return _canonical(grads, model.module.config)
