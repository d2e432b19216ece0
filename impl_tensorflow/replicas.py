"""Data parallelism (``bench train --replicas K``; docs/data-parallel.md):
``tf.distribute.MirroredStrategy`` over K devices of this process.

:func:`replica_devices` is the strategy. The model's variables and the
optimizer are made under its scope (mirrored: one copy per device);
:func:`replica_train_step`, traced into one ``tf.function`` by runner.py,
splits each global batch by rows into K shards that the replicas compute on
their devices, and Keras sums their gradients:
every copy takes the step train.train_step takes over the whole batch, the
dropout masks included (each replica cuts its rows out of the batch's masks).

Several processes (``--processes P``, on one host or several):
``tf.distribute.MultiWorkerMirroredStrategy`` over the workers that
``TF_CONFIG`` lists, each with its own devices (one on a CPU), the all-reduce
between them over gRPC. The step is the same function: replica ids run over
the whole job, so each replica still takes its rows of the global batch,
which every worker reads alike. Worker 0 writes the run's files.
"""

from __future__ import annotations

import json
import os
from typing import NamedTuple

import tensorflow as tf

from shared.batching import BatchArrays
from shared.transitions import PAD

from . import updates
from .classifier import SNLIClassifier
from .head import transition_loss_sum
from .train import Optimizer


def replica_devices(device: str, replicas: int) -> tf.distribute.Strategy:
    """The strategy ``replicas`` replicas train under, which holds their
    devices: MirroredStrategy over K devices of this process (_devices), or,
    where TF_CONFIG describes a job of several workers,
    MultiWorkerMirroredStrategy over all of them (made before TensorFlow's
    runtime starts); a ValueError in one line where the job's replicas are
    not K."""
    workers = json.loads(os.environ.get("TF_CONFIG") or "{}").get("cluster", {}).get("worker", [])
    if len(workers) <= 1:
        return tf.distribute.MirroredStrategy(_devices(device, replicas))
    if device == "cpu" and replicas != len(workers):
        raise ValueError(f"replicas={replicas} over {len(workers)} TensorFlow workers on a CPU: each worker is one "
                         "replica there, so --processes must equal --replicas")
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    if strategy.num_replicas_in_sync != replicas:
        raise ValueError(f"replicas={replicas}, but the {len(workers)} workers of TF_CONFIG hold "
                         f"{strategy.num_replicas_in_sync} devices")
    return strategy


def _devices(device: str, replicas: int) -> list[str]:
    """The ``replicas`` devices a MirroredStrategy runs on: the first K GPUs,
    or on a CPU K logical devices of the host CPU. Those must be configured
    before TensorFlow's runtime starts (its first op or device listing); where
    it already started with fewer, a ValueError says so in one line."""
    if device == "gpu":
        gpus = tf.config.list_physical_devices("GPU")
        if len(gpus) < replicas:
            raise ValueError(f"replicas={replicas} on 'gpu' needs {replicas} GPUs; TensorFlow sees {len(gpus)}")
        return [f"/GPU:{i}" for i in range(replicas)]
    if device != "cpu":
        raise ValueError(f"device must be 'cpu' or 'gpu', got {device!r}")
    cpu = tf.config.list_physical_devices("CPU")[0]  # does not start the runtime
    configured = tf.config.get_logical_device_configuration(cpu)
    if configured is None or len(configured) < replicas:
        try:
            tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * replicas)
        except RuntimeError:  # the runtime has started: its logical devices are fixed
            pass
    have = len(tf.config.list_logical_devices("CPU"))
    if have < replicas:
        raise ValueError(f"replicas={replicas} needs {replicas} logical CPU devices, but TensorFlow's runtime already "
                         f"started with {have}: create the runner before TensorFlow runs anything in this process")
    return [f"/CPU:{i}" for i in range(replicas)]


class _Shard(NamedTuple):
    """The rows a replica computes: pairs [start, start + b) of a global batch
    of ``pairs`` (b: the pairs the replica is given). Both are int32 scalars
    of the traced step. The classifier hands it its dropout (``shard=``)."""

    pairs: tf.Tensor
    start: tf.Tensor

    def dropout(self, x: tf.Tensor, rate: float, seed, sentences: bool) -> tf.Tensor:
        """``tf.nn.experimental.stateless_dropout(x_global, rate, seed)`` cut to
        this replica's rows, for ``x`` of its rows only: the uniform numbers
        are drawn, with the sampler stateless_dropout uses
        (``stateless_random_uniform(shape, seed, dtype, alg=None)``), for the
        global batch's shape, and this replica's rows are kept; general_dropout
        then applies them exactly as stateless_dropout does (TF 2.21 nn_ops._dropout:
        ``where(u >= rate, x * (1 / (1 - rate)), 0)``), so every pair gets the mask
        it gets in one process, bit for bit. ``sentences``: x's rows are the 2b
        sentences (premises, then hypotheses) of the replica's b pairs; else its b pairs."""
        b = tf.shape(x)[0] // 2 if sentences else tf.shape(x)[0]
        rows = tf.range(self.start, self.start + b)
        total = self.pairs
        if sentences:  # the global batch's 2B sentences: premises 0..B-1, then hypotheses B..2B-1
            rows, total = tf.concat([rows, self.pairs + rows], axis=0), 2 * self.pairs

        def uniform_sampler(shape, dtype):
            global_shape = tf.concat([tf.reshape(total, [1]), tf.cast(shape[1:], tf.int32)], axis=0)
            return tf.gather(tf.random.stateless_uniform(global_shape, seed=seed, dtype=dtype, alg=None), rows)

        return tf.nn.experimental.general_dropout(x, rate=rate, uniform_sampler=uniform_sampler)


def _shard_rows(pairs: tf.Tensor, replicas: int, replica: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """(first row, row count) of ``replica``'s shard of ``pairs`` rows, as
    ``np.array_split(range(pairs), replicas)`` cuts them: the first
    ``pairs % replicas`` shards have one row more (a batch smaller than K
    leaves the last shards empty)."""
    replica = tf.cast(replica, tf.int32)
    base, extra = pairs // replicas, pairs % replicas
    start = replica * base + tf.minimum(replica, extra)
    return start, base + tf.cast(replica < extra, tf.int32)


def _shard_loss(model: SNLIClassifier, shard_batch: BatchArrays, seed: int, step, shard: _Shard,
                transition_weight: float = 0.0, steps=None) -> tf.Tensor:
    """One replica's share of train.batch_loss(training=True) over the global batch
    of ``shard.pairs`` pairs, of which ``shard_batch`` holds its rows: the sum
    of its pairs' cross-entropies over the global B (its mean times b / B,
    and 0 for an empty shard), plus ``transition_weight`` times the sum of its
    steps' transition losses over ``steps``, the global batch's count of
    non-PAD steps. Summed over the replicas it is the batch's mean loss, so the
    sum of their gradients is the gradient of that mean."""
    pairs = tf.cast(shard.pairs, model.embed.embedding.dtype)
    labels = shard_batch.labels
    with model.dropout(seed, step, shard):
        if not transition_weight:
            _, _, logits = model(*shard_batch[:4])
            return tf.reduce_sum(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)) / pairs
        parses, logits = model.parse(*shard_batch[:4], mode="gold")
    class_loss = tf.reduce_sum(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)) / pairs
    total, _ = transition_loss_sum(parses)
    return class_loss + transition_weight * (total / steps)


def replica_train_step(strategy: tf.distribute.Strategy, model: SNLIClassifier, optimizer: Optimizer,
                       batch: BatchArrays, *, seed: int = 0, step=0, transition_weight: float = 0.0,
                       jit_compile: bool = False) -> tf.Tensor:
    """train.train_step with the global batch of B pairs split by rows over the
    strategy's K replicas (``np.array_split``: uneven shards allowed, empty
    ones included). Each replica computes its shard's loss (_shard_loss: its
    share of the batch's mean) and gradient on its device, with the dropout
    masks its pairs get in one process; Keras' apply_gradients, called in
    replica context, sums the K gradients (an all-reduce of the strategy) and
    updates every copy of the mirrored variables. So it is train_step's step:
    the frozen masks act on each replica's gradient (0/1, exact under the
    sum), the coupled L2 term is added by replica 0 alone, and Adam's
    corrections are set once, in cross-replica context, before the replicas
    run. The frozen entries and the weight decay are the optimizer's.
    ``jit_compile``: XLA compiles each replica's forward and backward
    pass (one XLA program cannot span the K devices, so the all-reduce and the
    update run around it). Call it inside ``strategy.scope()``. Returns the
    batch's loss before the update (the sum of the replicas' shares)."""
    variables = [variable for _, variable, _ in optimizer.trainable]
    replicas = strategy.num_replicas_in_sync
    pairs = tf.shape(batch.labels)[0]
    steps = None
    if transition_weight:  # the global batch's non-PAD steps: each replica's transition loss is over them
        real = tf.not_equal(tf.concat([batch.premise_transitions, batch.hypothesis_transitions], axis=0), PAD)
        steps = tf.reduce_sum(tf.cast(real, model.embed.embedding.dtype))
    updates.adam_corrections(optimizer)  # cross-replica: assigns every copy, before any replica reads them

    def shard_gradients(shard_batch, step, shard, steps):
        with tf.GradientTape() as tape:
            loss = _shard_loss(model, shard_batch, seed, step, shard, transition_weight=transition_weight,
                               steps=steps)
        grads = tape.gradient(loss, variables, unconnected_gradients=tf.UnconnectedGradients.ZERO)
        return loss, [tf.convert_to_tensor(g) for g in grads]  # dense (the embedding's are IndexedSlices)

    if jit_compile:
        shard_gradients = tf.function(shard_gradients, jit_compile=True, autograph=False)

    def replica_step(batch, step):
        replica = tf.distribute.get_replica_context().replica_id_in_sync_group
        start, size = _shard_rows(pairs, replicas, replica)
        shard_batch = BatchArrays(*(x[start:start + size] for x in batch[:5]))
        loss, grads = shard_gradients(shard_batch, step, _Shard(pairs, start), steps)
        grads = updates.corrected(optimizer, grads, decay=tf.equal(replica, 0))
        optimizer.keras.apply_gradients([(grad, variable) for grad, variable in zip(grads, variables)])
        return loss

    losses = strategy.run(replica_step, args=(batch, step))
    return strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)
