"""The TensorFlow SPINN behind the shared Runner interface (docs/runner-interface.md).

Each entry point (encode, loss_and_grads, train_step, the parse of each
mode and the two REINFORCE programs of docs/spec.md §7) is one ``tf.function``
with an input signature whose sizes are ``None``: traced once, it serves every
batch size B, token count N and step count T. Its first input is the batch, a
shared.batching.BatchArrays of tensors (the signature :data:`BATCH`). :class:`Traced` counts traces
(Python runs only while TensorFlow traces) and times the trace
(``get_concrete_function``, traced.py) apart from the first call, which is where
TensorFlow optimises the graph (Grappler) or XLA compiles it.

Options: ``xla=True`` compiles the same functions with ``jit_compile=True``
(the thin stack becomes a plain tensor, see masked.py). It is still one trace,
but XLA compiles one program per distinct input shape: counted as
``xla_compilations``, the time of those calls added to ``compile_s``.
``container="tensor_array"|"dense"`` picks the thin stack's container explicitly
(default: TensorArray on the CPU without XLA, dense otherwise).
``family`` names the algorithm family (bench/frameworks.py), whose module
is imported when the runner is made, and only then: ``"masked"`` (the default:
masked.py's masked arrays in one traced graph), ``"lists"`` (the
``tensorflow-eager`` implementation: lists.py's define-by-run SPINN on
per-example lists, with no ``tf.function`` at all: the same variables,
losses, optimizers and entry points, called eagerly (:class:`Untraced`), so
nothing is traced or compiled), or ``"levels"`` (the ``tensorflow-levels``
implementation: levels.py's LevelClassifier, SPINN on a level schedule made
on the host for every batch, levels.py's ``host_schedule``, the batch's
``levels``; gold transitions only, the rest refused: ``unsupported``).
``last_rows`` holds the last batch's levels and rows (levels.py),
``last_phases`` its ``schedule`` (seconds on the host).

Dropout's masks are a function of (seed, step): the traced training steps
take the step number as an input, and the classifier folds it into a seed
made from the runner's (classifier.SNLIClassifier.dropout).

``replicas=K`` (``bench train --replicas K``) trains data-parallel with
``tf.distribute.MirroredStrategy`` over K devices of this process (K logical
CPU devices on a CPU, made before TensorFlow's runtime starts; the first K
GPUs on GPUs): the training step is replicas.py's replica_train_step, still one
``tf.function`` (replicas.py is imported only then). Everything else (encode,
loss_and_grads, parse, the parameters and the optimizer state) reads the
first copy on the first device. With ``xla=True`` as well, XLA compiles each
replica's forward and backward pass (a ``jit_compile`` function inside
``strategy.run``).
"""

from __future__ import annotations

import functools
import importlib
from typing import Mapping, Sequence

import numpy as np
import tensorflow as tf

from shared import optimizers
from shared import reinforce as shared_reinforce
from shared.batching import BatchArrays, PairBatch
from shared.params import ModelConfig, param_shapes
from shared.runner import CompileStats, check_replicas, run_program
from shared.runner import Runner as RunnerBase
from shared.parsing import Parsed, check_mode, split_pairs

from . import convert, reinforce, train
from .classifier import SNLIClassifier
from .dispatches import eager_ops, graph_ops, xla_ops
from .layers import CONTAINERS
from .traced import Traced, Untraced

# The algorithm families (bench/frameworks.py), by the module that holds each one's SPINN: masked arrays in one
# static graph, per-example lists define-by-run, a level schedule made on the host.
FAMILIES = ("masked", "lists", "levels")

TOKENS = tf.TensorSpec([None, None], tf.int32)  # [B, N]
TRANSITIONS = tf.TensorSpec([None, None], tf.int32)  # [B, T]
LABELS = tf.TensorSpec([None], tf.int32)  # [B]
BATCH = BatchArrays(TOKENS, TRANSITIONS, TOKENS, TRANSITIONS, LABELS)  # a batch, as the programs take it
STEP = tf.TensorSpec([], tf.int64)  # the step number dropout's masks are drawn from
UNIFORMS = tf.TensorSpec([None, None], tf.float64)  # [B, T], sampled mode (shared.parsing.batch_uniforms)
BASELINE = tf.TensorSpec([], tf.float64)  # REINFORCE's b: an input, so a new b never retraces


def resolve_device(device: str) -> str:
    """"cpu" or "gpu" -> the TensorFlow device name: "/CPU:0", or "/GPU:0"
    (the first visible GPU); a ValueError where there is none."""
    if device == "cpu":
        return "/CPU:0"
    if device == "gpu":
        if not tf.config.list_physical_devices("GPU"):
            raise ValueError("device 'gpu' asked for, but TensorFlow sees no GPU")
        return "/GPU:0"
    raise ValueError(f"device must be 'cpu' or 'gpu', got {device!r}")


class Runner(RunnerBase):
    framework = "tensorflow"

    def __init__(self, params: Mapping[str, np.ndarray], config: ModelConfig, *, dtype: str = "float32",
                 device: str = "cpu", dropout: float = 0.0, seed: int = 0, xla: bool = False,
                 container: str | None = None, transition_weight: float = 0.0, reinforce_weight: float = 1.0,
                 entropy_weight: float = 0.0, family: str = "masked", replicas: int = 1, **options):
        if options:
            raise TypeError(f"unknown TensorFlow runner options {sorted(options)} "
                            "(known: xla, container, family, replicas)")
        if family not in FAMILIES:
            raise ValueError(f"unknown family {family!r}; choose from {FAMILIES}")
        if family == "lists" and (xla or container is not None):
            raise ValueError("family 'lists' runs eagerly and builds no graph: xla and container do not apply")
        self.replicas = check_replicas(replicas)
        if self.replicas > 1 and family == "levels":
            raise ValueError("family 'levels' runs on one device (replicas=1)")
        if self.replicas > 1 and family == "lists":
            raise ValueError("replicas need a traced step (MirroredStrategy runs the replicas of one tf.function); "
                             "family 'lists' runs eagerly and has none")
        super().__init__(params, config, dtype=dtype, device=device, dropout=dropout, seed=seed,
                         transition_weight=transition_weight, reinforce_weight=reinforce_weight,
                         entropy_weight=entropy_weight, family=family)
        # The family's module, imported now: a runner loads only the family it runs.
        self._family_module = importlib.import_module(f"{__package__}.{family}")
        if family != "lists":
            # Default container: the TensorArray for the CPU graph executor (see
            # masked.py); a dense tensor under XLA (which cannot compile the
            # TensorArray scatter) and on a GPU, where the TensorArray's
            # one-element-per-item scatter would be hundreds of tiny device
            # copies a step, while copying the dense thin stack costs
            # microseconds at GPU memory bandwidth.
            container = container or ("dense" if xla or device == "gpu" else "tensor_array")
            if container not in CONTAINERS:
                raise ValueError(f"container must be one of {CONTAINERS}, got {container!r}")
            if xla and container == "tensor_array":
                raise ValueError("XLA cannot compile the TensorArray container (TensorListScatterIntoExistingList); "
                                 "use container='dense' with xla=True")
        self.device = resolve_device(device)
        # With replicas, a MirroredStrategy over K devices (the first is self.device).
        self.strategy = None
        if self.replicas > 1:
            from .replicas import replica_devices

            self.strategy = replica_devices(device, self.replicas)
        self.xla = bool(xla)
        self.container = container
        # The programs' batch: the five arrays, and with the level schedule its arrays (levels.LEVELS).
        self._signature = BATCH._replace(levels=self._family_module.LEVELS) if family == "levels" else BATCH
        # The lists family, eager, reads each decision back to Python (last_host_syncs counts them).
        self.reads_decisions_on_host = family == "lists"
        classifier = self._family_module.LevelClassifier if family == "levels" else SNLIClassifier
        with self._placement():
            model = classifier(config, encoder=self._family_module.SPINN, dtype=convert.resolve_dtype(dtype),
                               dropout=dropout, container=container)
            self.model = convert.from_canonical(params, model)
        # Every entry point below is wrapped once: traced into a tf.function
        # (the graph), or called as it is (eager).
        wrap = Untraced if family == "lists" else Traced
        transition_weight = self.transition_weight

        def encode(batch):
            return model(*batch[:4], **({"levels": batch.levels} if batch.levels else {}))

        def loss_and_grads(batch):
            return train.loss_and_grads(model, batch, transition_weight=transition_weight)

        weights = {"reinforce_weight": self.reinforce_weight, "entropy_weight": self.entropy_weight}

        def reinforce_loss_and_grads(batch, premise_u, hypothesis_u, baseline):
            return reinforce.loss_and_grads(model, batch, (premise_u, hypothesis_u), baseline, **weights)

        self._reinforce_weights = weights
        self._shapes: list[tuple] = []  # (function, B, N, T) as first met, in order
        self._observers: list = []  # what sees each traced call's arguments while dispatches counts (traced.py)
        self._wrap = functools.partial(wrap, observers=self._observers)
        self._traced_encode = self._wrap("encode", encode, [self._signature], self.xla, self._shapes)
        self._traced_loss_and_grads = self._wrap("loss_and_grads", loss_and_grads, [self._signature], self.xla,
                                                 self._shapes)
        self._traced_train_step: Traced | None = None
        self._traced_reinforce_loss_and_grads = self._wrap("reinforce_loss_and_grads", reinforce_loss_and_grads,
                                                           [BATCH, UNIFORMS, UNIFORMS, BASELINE], self.xla,
                                                           self._shapes)
        self._traced_reinforce_step: Traced | None = None
        self._retired: list[Traced] = []  # train steps of earlier optimizers (still counted)
        self._traced_parse: dict[str, Traced] = {}  # one traced parse per mode, made on first use

    def _placement(self):
        """Where variables are made: on self.device, or mirrored on every replica's device."""
        return self.strategy.scope() if self.strategy is not None else tf.device(self.device)

    def _batch(self, batch: PairBatch) -> BatchArrays:
        """The batch as the programs take it: its five arrays as tensors on the
        device, and with the level schedule its arrays (levels.py's
        host_schedule, made on the host)."""
        arrays = batch.arrays()
        if self.family == "levels":
            tracker = self.config.tracker_dim > 0
            levels, self.last_rows, self.last_phases = self._family_module.host_schedule(batch, tracker)
            arrays = arrays._replace(levels=levels)
        with tf.device(self.device):
            return BatchArrays(*(tf.constant(a) for a in arrays[:5]),
                               levels=tf.nest.map_structure(tf.constant, arrays.levels))

    def _tensors(self, *arrays) -> list[tf.Tensor]:
        with tf.device(self.device):
            return [tf.constant(a) for a in arrays]

    def _encode(self, batch: PairBatch) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        with tf.device(self.device):
            out = self._traced_encode(self._batch(batch))
        if self.family == "lists":
            self.last_host_syncs = 0  # gold mode: Python reads the transitions, already on the host
        return tuple(t.numpy() for t in out)

    def _parse(self, batch: PairBatch, mode: str, uniforms: tuple[np.ndarray, np.ndarray] | None) -> Parsed:
        """One traced function per mode (its uniforms, sampled mode's two
        float64 [B, T], are inputs); the decisions are taken inside it, and
        the call returns once."""
        if mode not in self._traced_parse:
            model = self.model

            def parse(batch, *uniforms):  # in sampled mode two float64 [B, T] after the batch
                return train.parse(model, batch, mode, uniforms or None)

            signature = [self._signature] + ([UNIFORMS, UNIFORMS] if mode == "sampled" else [])
            self._traced_parse[mode] = self._wrap(f"parse_{mode}", parse, signature, self.xla, self._shapes)
        with tf.device(self.device):
            parses, logits = self._traced_parse[mode](self._batch(batch), *self._tensors(*(uniforms or ())))
        if self.family == "lists":  # define-by-run: how often Python read a decision back
            self.last_host_syncs = self.model.spinn.last_host_syncs
        return split_pairs(parses, logits, lambda t: t.numpy())

    def _loss_and_grads(self, batch: PairBatch) -> tuple[float, dict[str, np.ndarray]]:
        with tf.device(self.device):
            loss, grads = self._traced_loss_and_grads(self._batch(batch))
        return float(loss.numpy()), convert.grads_to_canonical(self.model, grads)

    def set_optimizer(self, name: str, lr: float, *, frozen: Sequence[str] = (), **hyper) -> None:
        hyper = optimizers.resolve(name, hyper)
        frozen = optimizers.check_frozen(frozen, param_shapes(self.config))
        with self._placement():
            optimizer = train.make_optimizer(name, self.model, lr, frozen=frozen, **hyper)
        self._retired += [f for f in (self._traced_train_step, self._traced_reinforce_step) if f is not None]
        model, seed, transition_weight = self.model, self.seed, self.transition_weight
        # With replicas, XLA compiles each replica's forward and backward pass
        # (the all-reduce and the update run around it, outside XLA).
        strategy, xla_inside = self.strategy, self.xla and self.strategy is not None
        if strategy is not None:
            from .replicas import replica_train_step

        def train_step(batch, step):
            if strategy is not None:  # the batch split over the replicas: the same step
                with strategy.scope():
                    return replica_train_step(strategy, model, optimizer, batch, seed=seed, step=step,
                                              transition_weight=transition_weight, jit_compile=xla_inside)
            return train.train_step(model, optimizer, batch, seed=seed, step=step, transition_weight=transition_weight)

        # A new optimizer has new slot variables (and maybe other frozen
        # entries), so it gets its own traced step; the step count is kept.
        self._traced_train_step = self._wrap("train_step", train_step, [self._signature, STEP], self.xla,
                                             self._shapes, xla_inside)
        weights = self._reinforce_weights

        def reinforce_step(batch, premise_u, hypothesis_u, baseline, step):
            return reinforce.train_step(model, optimizer, batch, (premise_u, hypothesis_u), baseline, seed=seed,
                                        step=step, **weights)

        self._traced_reinforce_step = self._wrap("reinforce_step", reinforce_step,
                                                 [BATCH, UNIFORMS, UNIFORMS, BASELINE, STEP], self.xla, self._shapes)
        self.optimizer = optimizer

    def set_learning_rate(self, lr: float) -> None:
        self._need_optimizer()
        train.set_learning_rate(self.optimizer, lr)  # a variable the traced step reads: no retrace

    def _train_step(self, batch: PairBatch) -> float:
        # With replicas, last_replica_seconds stays empty: the K replicas run
        # inside one program (one tf.function call), so how long each device
        # computed or waited at the all-reduce is not observable from Python.
        with tf.device(self.device):
            loss = self._traced_train_step(self._batch(batch), *self._tensors(np.int64(self.steps)))
        self.steps += 1
        return float(loss.numpy())

    def _reinforce_loss_and_grads(self, batch: PairBatch, uniforms: tuple[np.ndarray, np.ndarray],
                                  baseline: float) -> tuple[float, dict[str, np.ndarray], np.ndarray]:
        """Eval mode: (REINFORCE loss, canonical gradients, rewards <float>[B]); one trace for every shape."""
        with tf.device(self.device):
            loss, grads, rewards = self._traced_reinforce_loss_and_grads(*self._reinforce_inputs(batch, uniforms,
                                                                                                 baseline))
        return float(loss.numpy()), convert.grads_to_canonical(self.model, grads), rewards.numpy()

    def _reinforce_step(self, batch: PairBatch, uniforms: tuple[np.ndarray, np.ndarray], baseline: float) -> dict:
        """One traced optimizer step on the REINFORCE loss (dropout as train_step);
        shared.reinforce.step_record of the numbers computed before the update."""
        if self.replicas > 1:
            raise NotImplementedError("tensorflow: replicas split train_step only; a REINFORCE step (its baseline and "
                                      "records over the whole batch) runs on one device")
        with tf.device(self.device):
            loss, numbers = self._traced_reinforce_step(*self._reinforce_inputs(batch, uniforms, baseline),
                                                        *self._tensors(np.int64(self.steps)))
        self.steps += 1
        return shared_reinforce.step_record(float(loss.numpy()), **{k: v.numpy() for k, v in numbers.items()})

    def _reinforce_inputs(self, batch: PairBatch, uniforms, baseline: float) -> list:
        """The inputs of the REINFORCE functions (checked by the Runner): the batch, the uniforms, b."""
        return [self._batch(batch), *self._tensors(*uniforms, np.float64(baseline))]

    def optimizer_state(self) -> dict[str, np.ndarray]:
        self._need_optimizer()
        return train.optimizer_state(self.model, self.optimizer, self.steps)

    def load_optimizer_state(self, state: Mapping[str, np.ndarray]) -> None:
        self._need_optimizer()
        train.load_optimizer_state(self.model, self.optimizer, state)
        self.steps = int(state[optimizers.STEP])

    def get_params(self) -> dict[str, np.ndarray]:
        return convert.to_canonical(self.model)

    def _functions(self) -> list[Traced]:
        steps = [f for f in (self._traced_train_step, self._traced_reinforce_step) if f is not None]
        return ([self._traced_encode, self._traced_loss_and_grads, self._traced_reinforce_loss_and_grads]
                + self._retired + steps + list(self._traced_parse.values()))

    def compile_stats(self, program: str | None = None) -> CompileStats:
        """Summed over the entry points used so far (or of one: "encode",
        "loss_and_grads", "train_step"): traces, compile_s = trace time + the
        calls that optimised or XLA-compiled (their run included)."""
        if program is None:
            return CompileStats.total([f.stats() for f in self._functions()], shapes=self._shapes)
        return CompileStats.total([f.stats() for f in self._functions() if f.name == program])

    def _dispatches(self, program: str, batch: PairBatch, args: tuple) -> dict:
        """What one call ran (dispatches.py): eagerly, the ops the eager runtime executed; with XLA, the compiled
        programs' operations XLA's runtime executed; else the ops of each traced graph the call ran, each loop's
        body once per iteration (counted on the arguments each function is called with: ``_observers``)."""
        def call():
            run_program(self, program, batch, *args)

        if isinstance(self._traced_encode, Untraced):
            found, counts = eager_ops(call), "ops the eager runtime executed"
        elif self.xla:
            found, counts = xla_ops(call), "operations of XLA's compiled programs executed"
        else:
            graphs: list[dict] = []
            self._observers.append(lambda traced, inputs: graphs.append({"function": traced.name,
                                                                         **graph_ops(traced.function, inputs)}))
            try:
                call()
            finally:
                self._observers.clear()
            found = {"ops": sum(graph["ops"] for graph in graphs), "graphs": graphs}
            counts = "ops of the traced graphs run, each loop's body once per iteration"
        return {"count": found.pop("ops"), "counts": counts, **found}

    # -- what tf.function builds (bench explain) ----------------------------

    def trace(self, program: str, batch: PairBatch | None = None) -> Traced:
        """The traced entry point "encode", "loss_and_grads", "train_step" or
        "parse:MODE" (after a parse in that mode), traced (timed) if it was not:
        ``.concrete_function().graph`` is its graph, ``.function`` the bare
        tf.function (called with tensors, it skips the host-side checks of
        ``encode`` and friends). The input signature leaves B, N and T open, so
        one trace serves every batch; given ``batch``, its tensors are looked
        up in the function's trace cache as a call would (a retrace would show
        in ``compile_stats``)."""
        self._need_traced()
        if program == "train_step":
            self._need_optimizer()
            traced = self._traced_train_step
        elif program.startswith("parse:"):  # "parse:gold", "parse:predicted", "parse:sampled" (docs/spec.md §7)
            mode = check_mode(program.split(":", 1)[1])
            if mode not in self._traced_parse:
                raise ValueError(f"{program} is traced by its first call: call parse(batch, {mode!r}) first")
            traced = self._traced_parse[mode]
        else:
            functions = {"encode": self._traced_encode, "loss_and_grads": self._traced_loss_and_grads}
            if program not in functions:
                raise ValueError(f"unknown program {program!r}; choose from encode, loss_and_grads, train_step")
            traced = functions[program]
        traced.concrete_function()
        if batch is not None:
            traced.function.get_concrete_function(*self.program_args(program, batch))
        return traced

    def _program_args(self, program: str, batch: PairBatch) -> list:
        """program_args, the batch checked: the arguments ``program`` ("encode",
        "loss_and_grads", "train_step", "parse:gold" or "parse:predicted") is
        called with for ``batch`` (the batch's tensors, with the level schedule
        its ten arrays, made here on the host; then the step number for
        train_step)."""
        self._need_traced()
        if program.startswith("parse:"):
            return [self._batch(batch)]
        if program not in ("encode", "loss_and_grads", "train_step"):
            raise ValueError(f"unknown program {program!r}; choose from encode, loss_and_grads, train_step")
        if program == "train_step":
            self._need_optimizer()
            return [self._batch(batch), *self._tensors(np.int64(self.steps))]
        return [self._batch(batch)]

    def _need_traced(self) -> None:
        """The lists family runs its entry points eagerly: no tf.function to trace or call."""
        if self.family == "lists":
            raise NotImplementedError("tensorflow: family 'lists' runs eagerly (tf.function is not used): "
                                      "there is no program to trace apart from a call")
