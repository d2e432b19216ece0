"""``python -m bench run``, ``report`` and ``compare``: the cross-framework benchmark.

``plan`` (the run command) decides what to measure, ``driver`` drives one ``worker`` process per implementation through
the rounds and writes the records (``record``); ``markdown`` renders tables, targets and plots from them.
"""
