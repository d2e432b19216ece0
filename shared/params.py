"""Canonical parameters (docs/spec.md §4): names, shapes, initialisation, .npz files.

Every implementation loads and saves exactly this layout, so one file gives
the same numbers in every framework. Kernels are ``[in, out]``
(``y = x @ kernel``); a framework that stores ``[out, in]`` transposes on load.

The frameworks never use their own initialisers: :func:`init_params` draws
every weight here, with NumPy and a seed, so all of them start identical.
"""

from __future__ import annotations

import json
import numbers
import os
import zipfile
import zlib
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Mapping

import numpy as np

from shared.files import written_aside


class ParamError(ValueError):
    """A parameter set or file that does not match the canonical layout."""


@dataclass(frozen=True)
class ModelConfig:
    """Model sizes (docs/spec.md §3). Defaults are the full-size model of the tests."""

    vocab_size: int  # V: rows of the embedding, <pad> = 0 and <unk> = 1 included
    embed_dim: int = 300  # E: word vector size (GloVe 300d in the 2016 paper)
    hidden_dim: int = 300  # H: h and c of every stack item
    tracker_dim: int = 64  # D: tracker LSTM size; 0 turns the tracker off
    mlp_dim: int = 1024  # M: width of the classifier MLP
    mlp_layers: int = 2  # L: number of ReLU layers before the output layer
    lowercase: bool = True  # words are lowercased before the vocabulary lookup
    # A transition classifier on the tracker state (docs/spec.md §7): the model
    # can then decide its own parse. Needs the tracker (tracker_dim > 0).
    transition_head: bool = False

    def __post_init__(self) -> None:
        # Types first: a size read as "300" or 300.0 from a hand-edited
        # meta.config would otherwise fail later with an unrelated TypeError.
        for name in _SIZE_FIELDS:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                raise ParamError(f"config: {name} must be an integer, got {value!r}")
        for name in _FLAG_FIELDS:
            if not isinstance(getattr(self, name), bool):
                raise ParamError(f"config: {name} must be true or false, got {getattr(self, name)!r}")
        for name in ("vocab_size", "embed_dim", "hidden_dim", "mlp_dim"):
            if getattr(self, name) < 1:
                raise ParamError(f"config: {name} must be >= 1, got {getattr(self, name)}")
        for name in ("tracker_dim", "mlp_layers"):
            if getattr(self, name) < 0:
                raise ParamError(f"config: {name} must be >= 0, got {getattr(self, name)}")
        if self.transition_head and self.tracker_dim == 0:
            raise ParamError("config: transition_head needs the tracker (tracker_dim > 0), "
                             "because the head reads the tracker state")

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "ModelConfig":
        """The config that ``meta.config`` records; ParamError says what is wrong with it."""
        try:
            data = json.loads(text)
        except ValueError as err:  # JSONDecodeError, or an integer too long to convert
            raise ParamError(f"meta.config is not valid JSON ({err}): {_shorten(text)!r}") from None
        if not isinstance(data, dict):
            raise ParamError(f"meta.config must be a JSON object, got {type(data).__name__}: {_shorten(text)!r}")
        known = [f.name for f in fields(cls)]
        # The sizes and lowercase are required (docs/spec.md §4): a missing one
        # would silently take the full-size default. A key this version knows
        # but the file may lack (the transition head) takes its default, so
        # files written before the head existed load as models without one.
        missing = [name for name in known if name not in data and name not in _OPTIONAL_FIELDS]
        if missing:
            raise ParamError(f"meta.config lacks {', '.join(map(repr, missing))}")
        # An unknown key is refused: it may record a feature this version does
        # not implement, and ignoring it would give different numbers silently.
        unknown = [name for name in data if name not in known]
        if unknown:
            raise ParamError(f"meta.config has unknown key(s) {', '.join(map(repr, unknown))}; "
                             f"known keys are {', '.join(known)}")
        try:
            return cls(**data)
        except ParamError as err:  # "config: ..." from __post_init__
            raise ParamError(f"meta.{err}") from None

    def replace(self, **changes) -> "ModelConfig":
        return ModelConfig(**{**asdict(self), **changes})


_SIZE_FIELDS = ("vocab_size", "embed_dim", "hidden_dim", "tracker_dim", "mlp_dim", "mlp_layers")
_FLAG_FIELDS = ("lowercase", "transition_head")
_OPTIONAL_FIELDS = ("transition_head",)  # may be absent from meta.config (added after the first files)


def _shorten(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def param_shapes(config: ModelConfig) -> dict[str, tuple[int, ...]]:
    """The canonical name -> shape table, in a fixed order."""
    V, E, H = config.vocab_size, config.embed_dim, config.hidden_dim
    D, M, L = config.tracker_dim, config.mlp_dim, config.mlp_layers
    shapes: dict[str, tuple[int, ...]] = {
        "embed.embedding": (V, E),
        "projection.kernel": (E, 2 * H),
        "projection.bias": (2 * H,),
    }
    if D > 0:
        shapes["tracker.kernel_input"] = (3 * H, 4 * D)
        shapes["tracker.kernel_hidden"] = (D, 4 * D)
        shapes["tracker.bias"] = (4 * D,)
    shapes["reduce.left.kernel"] = (H, 5 * H)
    shapes["reduce.left.bias"] = (5 * H,)
    shapes["reduce.right.kernel"] = (H, 5 * H)
    if D > 0:
        shapes["reduce.track.kernel"] = (D, 5 * H)
    width = 4 * H
    for k in range(L):
        shapes[f"mlp.{k}.kernel"] = (width, M)
        shapes[f"mlp.{k}.bias"] = (M,)
        width = M
    shapes["output.kernel"] = (width, 3)
    shapes["output.bias"] = (3,)
    if config.transition_head:
        # Last in the table, so init_params draws every other weight exactly as
        # for the same model without a head (same seed, same numbers).
        shapes["tracker.transition.kernel"] = (D, 2)  # column 0 scores SHIFT, column 1 REDUCE
        shapes["tracker.transition.bias"] = (2,)
    return shapes


def init_params(config: ModelConfig, seed: int = 0, dtype=np.float32) -> dict[str, np.ndarray]:
    """Seeded initial weights for ``config``.

    Embeddings ~ N(0, 1) (GloVe vectors, when loaded, overwrite rows);
    kernels ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)), a common linear-layer default;
    biases zero (the transition head's too: no initial preference between
    SHIFT and REDUCE beyond what the kernel gives), except the forget gates of the tracker and of Reduce, which
    start at 1 so early training does not forget everything.
    The draw is done in float64 and then cast, so float32 and float64
    parameter sets from the same seed hold the same values up to rounding.
    """
    rng = np.random.default_rng(seed)
    H, D = config.hidden_dim, config.tracker_dim
    params: dict[str, np.ndarray] = {}
    for name, shape in param_shapes(config).items():
        if name == "embed.embedding":
            value = rng.standard_normal(shape)
        elif name.endswith("kernel") or name.endswith("kernel_input") or name.endswith("kernel_hidden"):
            bound = 1.0 / np.sqrt(shape[0])
            value = rng.uniform(-bound, bound, size=shape)
        else:
            value = np.zeros(shape)
        params[name] = value
    if D > 0:
        params["tracker.bias"][D : 2 * D] = 1.0  # gate order i, f, g, o
    params["reduce.left.bias"][2 * H : 4 * H] = 1.0  # gate order a, i, f1, f2, o
    return {name: value.astype(dtype) for name, value in params.items()}


def check_params(params: Mapping[str, np.ndarray], config: ModelConfig, *,
                 allow_nonfinite: bool = False) -> None:
    """Raise ParamError naming the first missing, extra or mis-shaped entry,
    the first entry that is not a floating-point array (integer kernels would
    be cast silently), and the first that holds NaN or infinite values (they
    make every encoding NaN), with how many.

    ``allow_nonfinite=True`` skips only the last check, for arrays that are
    results rather than weights (gradients of a diverged model).
    """
    expected = param_shapes(config)
    missing = [name for name in expected if name not in params]
    if missing:
        raise ParamError(f"missing parameter {missing[0]!r} (expected shape {expected[missing[0]]})"
                         + (f"; also missing {missing[1:]}" if len(missing) > 1 else ""))
    extra = [name for name in params if name not in expected]
    if extra:
        raise ParamError(f"unexpected parameter {extra[0]!r} with shape {tuple(np.shape(params[extra[0]]))}"
                         + (f"; also unexpected {extra[1:]}" if len(extra) > 1 else ""))
    for name, shape in expected.items():
        found = tuple(np.shape(params[name]))
        if found != shape:
            raise ParamError(f"parameter {name!r} has shape {found}, expected {shape}")
    for name in expected:
        value = np.asarray(params[name])
        if not np.issubdtype(value.dtype, np.floating):
            raise ParamError(f"parameter {name!r} has dtype {value.dtype}, expected a floating-point array")
        if allow_nonfinite or np.isfinite(value).all():
            continue
        nan = int(np.count_nonzero(np.isnan(value)))
        inf = int(np.count_nonzero(np.isinf(value)))
        what = " and ".join(part for part in (nan and f"{nan} NaN", inf and f"{inf} infinite") if part)
        raise ParamError(f"parameter {name!r} has {what} value(s) out of {value.size}; weights must be finite")


def save_params(path: str | os.PathLike, params: Mapping[str, np.ndarray], config: ModelConfig,
                vocab_words: np.ndarray | list[str]) -> None:
    """Write one self-contained .npz: weights, ``meta.config``, ``meta.vocab``.

    Written to a temporary file in the same folder and renamed into place, so
    an interrupted or failed save never leaves a broken file behind; a failed
    write (a full disk, say) is an OSError naming ``path`` (shared/files.py).
    """
    check_params(params, config)
    vocab = np.asarray(vocab_words, dtype=str)
    if vocab.ndim != 1 or len(vocab) != config.vocab_size:
        raise ParamError(f"meta.vocab has shape {vocab.shape}, expected ({config.vocab_size},)")
    arrays = {name: np.asarray(params[name]) for name in param_shapes(config)}
    arrays["meta.config"] = np.array(config.to_json())
    arrays["meta.vocab"] = vocab
    with written_aside(path) as tmp, open(tmp, "wb") as f:
        np.savez(f, **arrays)


@dataclass
class ParamFile:
    """What a parameter file holds."""

    params: dict[str, np.ndarray]
    config: ModelConfig
    vocab: np.ndarray  # <str>[V], index = token id


def load_params(path: str | os.PathLike) -> ParamFile:
    """Read and validate a canonical .npz (``allow_pickle=False``)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"parameter file not found: {path}")
    arrays = _read_npz(path)
    for meta in ("meta.config", "meta.vocab"):
        if meta not in arrays:
            raise ParamError(f"{path}: missing entry {meta!r}")
    meta = arrays.pop("meta.config")
    if meta.ndim != 0 or meta.dtype.kind != "U":
        raise ParamError(f"{path}: meta.config must be a 0-d unicode array holding JSON, "
                         f"got dtype {meta.dtype} with shape {meta.shape}")
    try:
        config = ModelConfig.from_json(str(meta))
    except ParamError as err:
        raise ParamError(f"{path}: {err}") from None
    vocab = arrays.pop("meta.vocab")
    if vocab.ndim != 1 or len(vocab) != config.vocab_size:
        raise ParamError(f"{path}: meta.vocab has shape {vocab.shape}, expected ({config.vocab_size},)")
    try:
        check_params(arrays, config)
    except ParamError as err:
        raise ParamError(f"{path}: {err}") from None
    return ParamFile(arrays, config, vocab)


def _read_npz(path: Path) -> dict[str, np.ndarray]:
    """Every array of the .npz at ``path``; a one-line ParamError for a file
    that is not one (a truncated download or copy, a text file so named), as
    for an entry that needs pickle. OSError (a file that cannot be opened) is
    left as it is: that is a failed read, not bad content."""
    if not zipfile.is_zipfile(path):
        # np.load would try the file as pickle and say it "contains pickled
        # (object) data", which sends the reader to the wrong cause.
        raise ParamError(f"{path}: not a readable .npz (not a zip archive: truncated, or not written by numpy)")
    try:
        with np.load(path, allow_pickle=False) as data:
            try:
                return {name: data[name] for name in data.files}
            except ValueError as err:
                if "allow_pickle" not in str(err):
                    raise
                # An object array: numpy would need pickle, which could run code from the file.
                raise ParamError(f"{path}: cannot read without pickle: {err}") from None
    except ParamError:
        raise
    except (ValueError, EOFError, KeyError, zipfile.BadZipFile, zlib.error) as err:
        # A damaged member: cut short, a bad CRC, a header numpy cannot read.
        reason = str(err).splitlines()[0] if str(err) else ""
        raise ParamError(f"{path}: not a readable .npz ({type(err).__name__}{': ' + reason if reason else ''})") \
            from None


def cast_params(params: Mapping[str, np.ndarray], dtype) -> dict[str, np.ndarray]:
    return {name: np.asarray(value, dtype=dtype) for name, value in params.items()}
