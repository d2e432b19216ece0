"""``python -m bench explain``: what each framework builds for one small batch.

``arguments`` (flags), ``batches`` (the batch and its variants), one module
per framework reading what its Runner built (``pytorch_graph``,
``tensorflow_graph``, ``jax_graph``), ``report`` (the whole figure, as JSON
and as text), ``bad_input`` (what each framework does with a broken batch)
and ``cli``. The guide's excerpts and figures are kept in step by
``bench/guide_sync.py``.
"""
