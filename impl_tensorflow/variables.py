"""The classifier's variables by name, in one fixed order: what convert.py maps
to the canonical names, what gradients are taken with respect to (train.py's
and reinforce.py's ``loss_and_grads``), and what an optimizer updates
(updates.py picks from it).

A name is the variable's attribute path in the model (``spinn.tracker.kernel``);
convert.name_map says which canonical entries are which rows of it.
"""

from __future__ import annotations

import tensorflow as tf


def by_name(model) -> dict[str, tf.Variable]:
    """TensorFlow variable name (attribute path) -> variable of a
    classifier.SNLIClassifier, in a fixed order."""
    out = {
        "embed.embedding": model.embed.embedding,
        "projection.kernel": model.projection.kernel,
        "projection.bias": model.projection.bias,
    }
    if model.spinn.tracker is not None:
        out["spinn.tracker.kernel"] = model.spinn.tracker.kernel
        out["spinn.tracker.bias"] = model.spinn.tracker.bias
        if model.spinn.tracker.transition is not None:
            out["spinn.tracker.transition.kernel"] = model.spinn.tracker.transition.kernel
            out["spinn.tracker.transition.bias"] = model.spinn.tracker.transition.bias
    out["spinn.reduce.kernel"] = model.spinn.reduce.kernel
    out["spinn.reduce.bias"] = model.spinn.reduce.bias
    for k, layer in enumerate(model.mlp):
        out[f"mlp.{k}.kernel"] = layer.kernel
        out[f"mlp.{k}.bias"] = layer.bias
    out["output.kernel"] = model.output.kernel
    out["output.bias"] = model.output.bias
    return out
