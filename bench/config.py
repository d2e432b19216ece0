"""Settings every command shares: the model-size presets, ``--data`` and the process settings the frameworks need
before they are imported."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
from dataclasses import dataclass
from typing import Sequence

from bench import frameworks
from bench.progress import stage
from shared.params import ModelConfig
from shared.snli import PARSES, SAMPLE_PATH, LoadReport, Pair, labelled_pairs, read_snli, with_parse

SIZE_FIELDS = ("embed_dim", "hidden_dim", "tracker_dim", "mlp_dim", "mlp_layers")

SIZES = {
    # name: (embed_dim, hidden_dim, tracker_dim, mlp_dim, mlp_layers)
    "full": (300, 300, 64, 1024, 2),  # the 2016 paper's SPINN-PI model
    "small": (32, 32, 8, 64, 1),  # quick experiments and smoke tests
    "quick": (16, 16, 4, 32, 1),  # bench run --quick: the harness end to end in seconds
    # --preset dynet-table2: neulab/dynet-benchmark's smallest Tree-LSTM (E = H = 256), one softmax layer classifying
    "table2": (256, 256, 64, 256, 0),
}


def preset(name: str) -> dict[str, int]:
    """The sizes of a preset as ModelConfig fields."""
    return dict(zip(SIZE_FIELDS, SIZES[name]))


def size_help() -> str:
    return "model size: " + "; ".join(f"{name}: E={e}, H={h}, D={d}, M={m}, L={layers}"
                                      for name, (e, h, d, m, layers) in SIZES.items())


def add_size_arguments(parser: argparse.ArgumentParser, default: str = "full") -> None:
    group = parser.add_argument_group("model size")
    group.add_argument("--size", choices=sorted(SIZES), default=default, help=f"{size_help()} [default: %(default)s]")
    for flag in SIZE_FIELDS:
        group.add_argument(f"--{flag.replace('_', '-')}", type=int, default=None, help="override the preset")
    group.add_argument("--transition-head", action="store_true",
                       help="give the tracker a transition head, so the model can predict its own parse "
                            "(docs/spec.md §7; needs a tracker)")


def model_config(args: argparse.Namespace, vocab_size: int, lowercase: bool) -> ModelConfig:
    """The ModelConfig that ``--size`` and the size overrides describe."""
    sizes = {key: value if getattr(args, key) is None else getattr(args, key)
             for key, value in preset(args.size).items()}
    head = bool(getattr(args, "transition_head", False))
    if head and not sizes["tracker_dim"]:
        raise ValueError("--transition-head needs a tracker: --tracker-dim must be > 0")
    return ModelConfig(vocab_size=vocab_size, lowercase=lowercase, transition_head=head, **sizes)


SHAPES = ("random", "left", "right", "balanced")


def add_data_arguments(parser: argparse.ArgumentParser, default: str = "sample") -> None:
    group = parser.add_argument_group("data")
    group.add_argument("--data", default=default,
                       help="'sample' (embedded SNLI dev sample), 'synthetic', 'shaped', 'arithmetic', "
                            "or a path to SNLI (.jsonl, .txt or the snli_1.0/ folder) [default: %(default)s]")
    group.add_argument("--split", default="train", choices=("train", "dev", "test"),
                       help="split to read when --data is the snli_1.0/ folder [default: %(default)s]")
    group.add_argument("--num-pairs", type=int, default=None,
                       help="synthetic/arithmetic/shaped: how many pairs to generate; a path: read at most this many")
    group.add_argument("--rows", type=row_range, default=None, metavar="START:END",
                       help="sample or a path: only the data rows START to END-1 (0-based; either may be left out: "
                            ":1000, 1000:) [default: every row]")
    group.add_argument("--shape", default="random", choices=SHAPES, help="shaped: tree shape [default: %(default)s]")
    group.add_argument("--length", type=int, default=20, help="shaped: sentence length [default: %(default)s]")
    group.add_argument("--data-seed", type=int, default=0, help="seed of generated data [default: %(default)s]")
    group.add_argument("--numbers", default="4:8",
                       help="arithmetic: how many numbers an expression has, MIN:MAX [default: %(default)s]")
    group.add_argument("--parse", default="gold", choices=PARSES,
                       help="the trees: the data's own, or one fixed shape for every sentence (left- or "
                            "right-branching, or balanced: the first ceil(n/2) words, then the rest) "
                            "[default: %(default)s]")


def row_range(text: str) -> tuple[int, int | None]:
    """``START:END`` (either may be empty) as (start, end or None); an argparse error for anything else."""
    first, colon, last = text.partition(":")
    try:
        start, end = int(first or 0), (int(last) if last else None)
    except ValueError:
        start = end = -1
    if not colon or start < 0 or (end is not None and end <= start):
        raise argparse.ArgumentTypeError(f"expected START:END with 0 <= START < END (e.g. :1000 or 1000:), "
                                         f"got {text!r}")
    return start, end


def rows_label(rows: tuple[int, int | None] | None) -> str:
    """How a data set's name says which rows it took: "-rows0-1000", "-rows1000-end", or ""."""
    return f"-rows{rows[0]}-{'end' if rows[1] is None else rows[1]}" if rows else ""


@dataclass
class Dataset:
    name: str
    pairs: list[Pair]
    report: LoadReport | None


def shows_progress(args: argparse.Namespace) -> bool:
    return not getattr(args, "quiet", False)


def load_dataset(args: argparse.Namespace, keep_unlabeled: bool = False) -> Dataset:
    """The pairs that ``--data`` and its companions name, with the trees of ``--parse``."""
    data, rows = args.data, getattr(args, "rows", None)
    if rows and data in ("synthetic", "arithmetic", "shaped"):
        raise ValueError(f"--rows selects rows of a file; --data {data} generates its pairs (use --num-pairs)")
    if data in ("synthetic", "arithmetic"):
        dataset = generated(data, args.num_pairs or 2000, args.data_seed, args)
    elif data == "shaped":
        from shared import synthetic

        pairs = synthetic.shaped_pairs(args.num_pairs or 512, length=args.length, shape=args.shape, seed=args.data_seed)
        dataset = Dataset(f"shaped-{args.shape}-{args.length}", pairs, None)
    else:
        with stage("read", enabled=shows_progress(args)) as progress:
            pairs, report = read_snli(SAMPLE_PATH if data == "sample" else data, split=args.split,
                                      keep_unlabeled=keep_unlabeled, limit=args.num_pairs, rows=rows,
                                      progress=progress.update)
        # Every row read unlabelled: refused alike by every command, before any of them builds on nothing.
        labelled_pairs(pairs, report.path, rows=report.rows_read)
        dataset = Dataset(("snli-dev-sample" if data == "sample" else str(data)) + rows_label(rows), pairs, report)
    dataset.pairs = with_parse(dataset.pairs, getattr(args, "parse", "gold"))
    return dataset


def generated(data: str, n: int, seed: int, args: argparse.Namespace) -> Dataset:
    """``n`` pairs of --data synthetic or arithmetic (``--numbers``), of ``seed``: the training data, and bench train's
    dev pairs (of the next seed)."""
    # Each generator imported where asked for: a record names the modules that ran.
    if data == "synthetic":
        from shared.synthetic import synthetic_pairs

        return Dataset(f"synthetic-{n}", synthetic_pairs(n, seed=seed), None)
    from shared.arithmetic import arithmetic_pairs

    try:
        low, high = (int(part) for part in getattr(args, "numbers", "4:8").split(":"))
    except ValueError:
        raise ValueError(f"--numbers: expected MIN:MAX, e.g. 4:8, got {args.numbers!r}") from None
    return Dataset(f"arithmetic-{n}-seed{seed}-numbers{low}to{high}",
                   arithmetic_pairs(n, seed=seed, min_len=low, max_len=high), None)


# Process settings of the frameworks: what each platform needs before its library is imported

# Set for every measured process beside the platforms' forced settings, whatever the caller's environment says.
FORCED_ENV = {
    "PYTHONUNBUFFERED": "1",
    "NVIDIA_TF32_OVERRIDE": "0",  # real float32 matmuls on NVIDIA GPUs, in any library that honours it
}

# OMP_WAIT_POLICY is left as the environment has it (recorded in "threads"): PASSIVE suits a shared machine.


DTYPES = ("float32", "float64")


def add_device_argument(parser, choices: Sequence[str] = ("cpu", "gpu"), default: str | None = "cpu",
                        help: str = "[default: %(default)s]") -> None:
    """--device, as every command declares it (bench run adds its own choices and their help)."""
    parser.add_argument("--device", default=default, choices=choices, help=help)


def add_dtype_argument(parser, default: str | None = None) -> None:
    parser.add_argument("--dtype", default=default, choices=DTYPES,
                        help="compute precision " + ("[default: %(default)s]" if default else
                                                     "[default: float64 for the reference, else float32]"))


def add_framework_argument(parser) -> None:
    parser.add_argument("--framework", required=True, choices=frameworks.NAMES, metavar="FRAMEWORK",
                        help=f"the reference, a framework or one of its variants: {', '.join(frameworks.NAMES)}")


def load_model(args: argparse.Namespace):
    """(dtype, the parameter file of ``--params``, its vocabulary) of a command that runs ``--framework``, the
    process settings applied first."""
    from shared.params import load_params
    from shared.vocab import Vocabulary

    dtype = args.dtype or default_dtype(args.framework)
    quiet_frameworks(dtype, [args.framework])
    loaded = load_params(args.params)
    return dtype, loaded, Vocabulary.from_array(loaded.vocab, lowercase=loaded.config.lowercase)


def default_dtype(name: str) -> str:
    """The compute precision of a command that names none: the reference's float64, every framework's float32."""
    return "float64" if frameworks.resolve(name)[0] == frameworks.REFERENCE.name else "float32"


def quiet_frameworks(dtype: str = "float32", names: Sequence[str] | None = None) -> None:
    """Process-wide settings for the frameworks (or those of ``names``) before any is imported: their platforms'
    environment where it says nothing, quiet loggers, and :class:`_QuietImport` for notices no switch silences."""
    for key, value in worker_env(dtype, names).items():  # a variable the environment sets keeps its value
        if key != "PYTHONUNBUFFERED":
            os.environ.setdefault(key, value)
    for platform in frameworks.platforms(names):
        for name in platform.loggers:
            logging.getLogger(name).setLevel(logging.ERROR)
        if platform.native_noise and platform.library not in sys.modules:
            _QuietImport.notices[platform.library] = platform.native_noise
    if _QuietImport.notices and _QuietImport not in sys.meta_path:
        sys.meta_path.insert(0, _QuietImport)


class _QuietImport:
    """A finder that imports a library whose native code writes notices no switch silences (Platform.native_noise)
    with file descriptor 2 held in a temporary file, passed on afterwards less those notices: no thread, no pipe."""

    notices: dict[str, tuple[bytes, ...]] = {}

    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name not in cls.notices:
            return None
        for finder in sys.meta_path[sys.meta_path.index(cls) + 1:]:  # the library, found as it would be without this
            spec = finder.find_spec(name, path, target) if hasattr(finder, "find_spec") else None
            if spec is not None:
                break
        else:
            return None
        if spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def quietly(module) -> None:
            notices = cls.notices.pop(name, ())  # imported once: a spec only looked up (find_spec) leaves them
            sys.stderr.flush()
            saved, held = os.dup(2), tempfile.TemporaryFile()
            os.dup2(held.fileno(), 2)
            try:
                exec_module(module)
            finally:
                sys.stderr.flush()
                os.dup2(saved, 2)
                os.close(saved)
                held.seek(0)
                kept = b"".join(line for line in held if not any(notice in line for notice in notices))
                held.close()
                while kept:
                    kept = kept[os.write(2, kept):]

        spec.loader.exec_module = quietly  # this import's loader only
        return spec


def worker_env(dtype: str = "float32", names: Sequence[str] | None = None) -> dict[str, str]:
    """The environment of a benchmark worker measuring the frameworks of ``names`` (every one without)."""
    settings = frameworks.configure_process(names, dtype)
    return {**settings["defaults"], **os.environ, **FORCED_ENV, **settings["forced"]}
