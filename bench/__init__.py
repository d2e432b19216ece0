"""Command line and benchmark harness of the SPINN suite (``python -m bench``)."""
