"""What the harness needs from tensorflow besides the model (shared/platform.py).

The library is imported inside the methods only: the process settings are
read before it is imported.
"""

from __future__ import annotations

from shared.platform import Platform as PlatformBase


class Platform(PlatformBase):
    name = "tensorflow"
    library = "tensorflow"

    # -- explain (impl_tensorflow/explain.py) -------------------------------------

    def explain(self, implementation, batches, config, params, out):
        from impl_tensorflow import explain
        return explain.explain(implementation, batches, config, params, out)

    def format_explain(self, implementation, result):
        from impl_tensorflow import explain
        return explain.format_explain(implementation, result)

    def explain_parse(self, batches, config, params):
        from impl_tensorflow import explain
        return explain.explain_parse(batches, config, params)

    def format_explain_parse(self, result):
        from impl_tensorflow import explain
        return explain.format_explain_parse(result)

    def explain_bad_input(self, config, params, bad):
        from impl_tensorflow import explain
        return explain.explain_bad_input(config, params, bad)
