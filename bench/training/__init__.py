"""``python -m bench train``, ``evaluate``, ``curves`` and ``scale``: one training loop for every framework (its
modules: README.md, "What is where")."""
