"""``python -m bench figures``: the guides' figures, drawn from committed runs and guide blocks.

The command is in :mod:`bench.figures.command`; each figure's numbers come
from :mod:`bench.figures.runs` (benchmark records in ``results/``),
:mod:`bench.figures.graphs` (the ``explain`` output blocks the guides keep
true) and :mod:`bench.figures.parsing` (one real sentence run through the
project's transition code) and :mod:`bench.figures.levels` (a small batch
run through the level scheduler). :mod:`bench.figures.style` makes the SVG files
byte-for-byte repeatable, so ``--check`` can compare them with the committed
ones. This file imports nothing: the submodules import one another, and a
package that imported them back would close an import circle.
"""
