"""``python -m bench render``: every measured number, table, code excerpt and explain output of README.md and docs/,
and every figure of docs/figures/, comes from its source (``python -m bench check`` checks that they do).

A quote is inline, ``[TEXT](SOURCE "QUERY")``, or a block, ``<!-- render SOURCE "QUERY" -->`` BODY ``<!-- /render -->``.
SOURCE is a path relative to the document, or ``#ID``:

* a results folder: inline a query of its tables (query.py), ``[2.47x](results/cpu "ratio infer gold 1 jax")``; a
  block of blocks.py, ``<!-- render results/cpu "ratios infer,train gold 1,32,128" -->``;
* a JSON file of one: a dotted key with the query's modifiers,
  ``[16](../results/today/today.json "torch.compile.dynamic.batches.0.recompiles")``;
* a source file: a block of the lines QUERY names (``SPINN._write``, or ``first anchor .. last anchor``) fenced;
  inline ``lines`` or ``lines NAME``, its lines of code (markers.code_lines);
* ``#ID``: a block of ``python -m bench explain``'s output, ``<!-- render #fig-main "explain --shape left" -->``
  (checked with times and versions masked; docs/figures/explain.json keeps the run it shows), and inline a count of
  its result, ``[29](#fig-main "batch.num_steps")``, or a time (a key ending in ``_s``) as the block shows it, in the
  quote's unit and digits (``[0.003 s](#fig-main "pytorch.forward_s")`` beside 3.07 ms).

Only results/manifest.toml's folders are quoted; a quote of a stale folder (bench reproduce --check) fails, unless a
GPU folder this machine cannot re-make shows its measured-at block. A measured-looking number typed in the prose is
refused (check.typed_numbers; ``<!-- not measured -->`` marks a goal or a setting). Figures are checked through the
numbers docs/figures/figures.json keeps of them, never their SVG bytes.
"""


def register(sub) -> None:
    from bench.check import add_arguments

    text = ("write every quoted value, block, excerpt and explain output of README.md and docs/, explain.json and the "
            "figures from their sources (--check: bench check)")
    add_arguments(sub.add_parser("render", help=text, description=text), write=True)
