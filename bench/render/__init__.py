"""``python -m bench render``: every measured number, table, code excerpt and explain output of README.md and docs/
comes from its source, and so does every figure of docs/figures/ (``python -m bench check`` checks that they do,
bench/check.py).

A document marks what it quotes with one syntax, a SOURCE and a QUERY, inline or as a block:

* a value in the prose is a link with a title: ``[TEXT](SOURCE "QUERY")``;
* a block is ``<!-- render SOURCE "QUERY" -->``, then the text rendered, then ``<!-- /render -->``.

SOURCE is a path relative to the document, or ``#ID``:

* a results folder (``results/cpu``): QUERY is a query of its tables (bench/render/query.py) inline,
  ``[2.47x](results/cpu "ratio infer gold 1 jax")``, or a block of bench/render/blocks.py,
  ``<!-- render results/cpu "ratios infer,train gold 1,32,128" -->``;
* a JSON file of one (``results/today/today.json``): QUERY is a dotted key, with the query's modifiers,
  ``[16](../results/today/today.json "torch.compile.dynamic.batches.0.recompiles")``;
* a source file (``../impl_jax/masked.py``): a block of the lines QUERY names (``SPINN._write``, or
  ``first anchor .. last anchor``) as a fenced excerpt; inline, its size, ``lines`` or ``lines SPINN``: the
  lines that hold code (command.code_lines), ``[212](../impl_jax/masked.py "lines")``;
* ``#ID``: a block of ``python -m bench explain``'s output, ``<!-- render #fig-main "explain --shape left" -->``
  (checked with times and versions masked against a fresh run; docs/figures/explain.json keeps the run it shows,
  times included), and inline a count of its result, ``[29](#fig-main "batch.num_steps")``
  (a key ending in ``_s`` is a time: the one the block shows, in the quote's unit and rounded to its digits,
  ``[0.003 s](#fig-main "pytorch.forward_s")`` beside a block that shows 3.07 ms).

Only folders of results/manifest.toml are quoted (results/archive/ holds history), so a user's own run never
changes a document, and a quote of a folder whose measured code changed since (bench reproduce --check) fails
the check, unless it is a GPU folder this machine cannot re-make and a document shows its measured-at block.
A measured-looking number typed in the prose is refused too (document.typed_numbers; a line marked
``<!-- not measured -->`` states a goal or a setting). The figures are drawn by bench/figures/ and checked
through the numbers docs/figures/figures.json keeps of them, never their SVG bytes.
"""


def register(sub) -> None:
    from bench.check import add_arguments

    text = ("write every quoted value, block, excerpt and explain output of README.md and docs/, explain.json and the "
            "figures from their sources (--check: bench check)")
    add_arguments(sub.add_parser("render", help=text, description=text), write=True)
