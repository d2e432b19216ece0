"""``python -m bench explain``: what each framework builds for one small batch.

``report`` (the flags, the batch and the views: the whole figure, ``--parse``, ``--levels`` and ``--bad-input``, each as
JSON and as text) and ``cli``. What a framework built is read by its Platform (``shared/platform.py``, the "explain"
methods, implemented in ``impl_<framework>/explain.py``), for every framework and explained variant of the registry
(``bench/frameworks.py``), in its order. The guides' explain blocks are kept in step by ``bench check`` and ``bench
render`` (bench/render/).
"""
