"""``python -m bench train``, ``evaluate`` and ``curves``: one training loop for every framework.

``settings`` (TrainConfig, the batch plan of an epoch), ``trainer`` (the loop, a
:class:`~bench.training.trainer.Trainer`), ``evaluate`` (accuracy, confusion matrix), ``checkpoint`` (atomic,
framework-independent checkpoints), ``metrics`` (metrics.jsonl), ``curves`` (rendering runs) and ``cli`` (the
subcommands).
"""
