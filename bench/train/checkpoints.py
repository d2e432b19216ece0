"""A training run's checkpoints (``OUT/checkpoints/step-NNNNNNNN/``), each written whole (docs/training.md)."""

from __future__ import annotations

import json
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

import numpy as np

from shared.files import sync_folder, synced, write_error
from shared.params import ModelConfig, ParamFile, load_params, save_params

CHECKPOINT_FILES = ("model.npz", "optimizer.npz", "state.json")
STATE_POSITION = ("step", "epoch", "batch_in_epoch")  # where in the run a checkpoint was taken


def save_optimizer_state(path: Path, state: Mapping[str, np.ndarray], description: str) -> None:
    """The optimizer state as an .npz (``step``, ``{slot}/{param}``, JSON ``meta.optimizer``): no pickle."""
    arrays = {key: np.asarray(value) for key, value in state.items()}
    arrays["meta.optimizer"] = np.array(description)
    with synced(path) as f:
        np.savez(f, **arrays)


def save_checkpoint(out_dir: Path, *, params: Mapping[str, np.ndarray], model_config: ModelConfig,
                    vocab_words, optimizer_state: Mapping[str, np.ndarray], optimizer_description: str,
                    state: dict, keep: int = 2) -> Path:
    """Write ``checkpoints/step-{step:08d}/`` atomically (a temporary folder, one rename); keep the newest ``keep``."""
    root = Path(out_dir) / "checkpoints"
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise write_error(err, root) from err
    final = root / f"step-{state['step']:08d}"
    tmp = root / f".tmp-step-{state['step']:08d}-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    target = final  # what is being written, for the error message
    try:
        tmp.mkdir()
        target = final / "model.npz"
        save_params(tmp / "model.npz", params, model_config, vocab_words)
        target = final / "optimizer.npz"
        save_optimizer_state(tmp / "optimizer.npz", optimizer_state, optimizer_description)
        target = final / "state.json"
        with synced(tmp / "state.json", "w") as f:
            json.dump(state, f, indent=1)
        sync_folder(tmp)
        target = final
        if final.exists():  # the same step saved before (a resumed run that had nothing left to do)
            shutil.rmtree(final)
        os.rename(tmp, final)
        sync_folder(root)
    except OSError as err:
        shutil.rmtree(tmp, ignore_errors=True)
        kept = list_checkpoints(out_dir)
        left = f" (checkpoint not written; the newest kept is {kept[-1].name})" if kept else " (checkpoint not written)"
        raise write_error(err, target, left) from err
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    for old in list_checkpoints(out_dir)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def list_checkpoints(out_dir: Path) -> list[Path]:
    """Complete checkpoints, oldest first (temporary folders are never listed)."""
    return sorted((p for p in (Path(out_dir) / "checkpoints").glob("step-*")
                   if p.is_dir() and all((p / f).is_file() for f in CHECKPOINT_FILES)), key=lambda p: p.name)


def check_folder(out_dir: str | os.PathLike, resume: bool) -> None:
    """Whether a run may start in ``out_dir``: ``resume`` needs a run.json, a new run a folder without a run."""
    out_dir = Path(out_dir)
    if resume:
        if not (out_dir / "run.json").exists():
            raise FileNotFoundError(f"--resume: no run to resume in {out_dir} (no run.json)")
    elif (out_dir / "run.json").exists() or (out_dir / "metrics.jsonl").exists() or list_checkpoints(out_dir):
        raise ValueError(f"{out_dir} already holds a run: add --resume to continue it, or choose another "
                         "--out (nothing is overwritten)")


def latest_checkpoint(out_dir: Path) -> Path | None:
    found = list_checkpoints(out_dir)
    return found[-1] if found else None


@dataclass
class Checkpoint:
    path: Path
    model: ParamFile
    optimizer_state: dict
    optimizer: dict  # the description: name, lr, frozen, hyperparameters
    state: dict  # step, epoch, batch_in_epoch, elapsed_s, best_dev_accuracy, ...


def load_checkpoint(path: Path) -> Checkpoint:
    path = Path(path)
    for name in CHECKPOINT_FILES:
        if not (path / name).is_file():
            raise FileNotFoundError(f"checkpoint {path} lacks {name}")
    with np.load(path / "optimizer.npz", allow_pickle=False) as data:
        opt_state = {key: data[key] for key in data.files}
    description = json.loads(str(opt_state.pop("meta.optimizer")))
    state = json.loads((path / "state.json").read_text())
    if not isinstance(state, dict) or any(not isinstance(state.get(key), int) for key in STATE_POSITION):
        raise ValueError(f"{path / 'state.json'}: expected integers {', '.join(STATE_POSITION)}")
    return Checkpoint(path, load_params(path / "model.npz"), opt_state, description, state)


def resume_checkpoint(out_dir: Path, writer: bool = True) -> tuple[Checkpoint | None, list[tuple[Path, str]]]:
    """The newest checkpoint that loads and (path, reason) for newer ones that did not; a ValueError if none loads."""
    found, skipped = None, []
    for path in reversed(list_checkpoints(out_dir)):
        try:
            found = load_checkpoint(path)
            break
        except Exception as err:  # whatever a damaged file raises: BadZipFile, EOFError, ValueError, ...
            reason = str(err).splitlines()[0] if str(err) else ""
            skipped.append((path, f"{type(err).__name__}: {reason}" if reason else type(err).__name__))
    for path, reason in skipped if writer else ():  # shown even with --quiet
        print(f"warning: --resume: skipping checkpoint {path} ({reason})", file=sys.stderr)
    if found is None and skipped:
        raise ValueError(f"--resume: no checkpoint in {Path(out_dir) / 'checkpoints'} loads (the newest, "
                         f"{skipped[0][0].name}: {skipped[0][1]})")
    if found is None and writer:
        print(f"note: --resume: {out_dir} holds no checkpoint yet (the run stopped before its first): "
              "starting again from step 0", file=sys.stderr)
    return found, skipped
