"""``python -m bench run``, ``report`` and ``compare``: the cross-framework benchmark (its modules: README.md, "What is
where")."""
