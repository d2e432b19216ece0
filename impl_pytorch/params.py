"""The model's parameters by canonical name (docs/spec.md §4), for training.

convert.py's ``name_map`` says which PyTorch tensor holds each canonical
entry; here are the two things train.py, reinforce.py, replicas.py and the
runner do with it: look the tensors up (:func:`canonical_parameters`), and
turn the gradients of frozen ones off for a step (:func:`trainable`).
"""

from __future__ import annotations

import contextlib
from typing import Iterator, Sequence

from torch import nn

from .convert import name_map


def canonical_parameters(model: nn.Module) -> dict[str, nn.Parameter]:
    """canonical name -> the PyTorch parameter that holds it (transposed where
    name_map says so), in canonical order."""
    parameters = dict(model.named_parameters())
    return {name: parameters[torch_name] for name, (torch_name, _) in name_map(model.config).items()}


@contextlib.contextmanager
def trainable(model: nn.Module, frozen: Sequence[str]) -> Iterator[None]:
    """Run the block with the gradients of the ``frozen`` parameters (canonical
    names) off, so autograd skips them (e.g. the V x E embedding gradient);
    restored afterwards."""
    params = canonical_parameters(model)
    switched = [params[name] for name in frozen if params[name].requires_grad]
    for param in switched:
        param.requires_grad_(False)
    try:
        yield
    finally:
        for param in switched:
            param.requires_grad_(True)

