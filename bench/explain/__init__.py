"""``python -m bench explain``: what each framework builds for one small batch.

``arguments`` (flags), ``batches`` (the batch and its variants), ``report`` (the whole figure, as JSON and as text),
``parse_view`` (``--parse``), ``levels_view`` (``--levels``: the host-scheduled levels and their loop bodies),
``bad_input`` (what each framework does with a broken batch) and ``cli``. What a framework built is read by its Platform
(``shared/platform.py``, the "explain" methods, implemented in ``impl_<framework>/explain.py``), for every framework and
explained variant of the registry (``bench/frameworks.py``), in its order. The guides' explain blocks are kept in step
by ``bench check`` and ``bench render`` (bench/render/).
"""
