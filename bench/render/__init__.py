"""``python -m bench render``: every measured number and results table of README.md and docs/ comes from a record.

The documents mark what they quote, and this package writes it:

* a number in the prose is a link to the results folder it comes from, with
  a query as the link's title::

      JAX reads [2.56x](results/cpu "ratio infer gold 1 jax") over PyTorch

  The query names a quote function (``bench/render/quotes.py``) and its
  arguments; the folder is the link's target, relative to the document. A
  function may take a precision after a colon (``ratio:1 ...``).
* a table is a block between two comments, whose first names a block
  function (``bench/render/blocks.py``), the folder and the arguments::

      <!-- render: ratio-table cpu infer,train gold 1,32,128 -->
      ...
      <!-- /render -->

Only folders of ``results/manifest.toml`` can be quoted (``results/archive/``
holds history), so a user's own run anywhere never changes a document.
``python -m bench render`` rewrites every quote and block; ``--check`` exits
1 naming each one that differs from its records, each quote of a stale
folder (``bench reproduce --check``), and each measured-looking number the
prose types instead of quoting (:mod:`bench.render.lint`). tests/test_render.py
runs the check.
"""
