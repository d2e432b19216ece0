"""Training tools of ``python -m bench``: ``curves`` renders the metrics of training runs."""
