"""JAX's persistent compilation cache, switched on and off for the whole process, and its events counted.

A process-wide setting: the runner's ``compilation_cache_dir=`` option and the
platform's ``enable_compilation_cache`` turn it on, the tests turn it off
again. Importing this module does not import JAX (platform.py imports it).
"""

from __future__ import annotations

import os

# The cache's events since it was first turned on, counted by the listener below.
_HITS, _MISSES = "/jax/compilation_cache/cache_hits", "/jax/compilation_cache/cache_misses"
_EVENTS = {_HITS: 0, _MISSES: 0}
_listening = False


def _count_cache_event(event: str, **kwargs) -> None:
    if event in _EVENTS:
        _EVENTS[event] += 1


def cache_counts() -> tuple[int, int]:
    """(hits, misses) of the persistent cache in this process so far: the runner counts those of each
    compilation (compile_stats) as the difference of two readings."""
    return _EVENTS[_HITS], _EVENTS[_MISSES]


def enable_compilation_cache(path: str | os.PathLike) -> None:
    """Turn on JAX's persistent compilation cache in ``path`` (process-wide).

    Every executable is written, however quick its compilation was (JAX's
    default skips those under a second). JAX decides once per process whether
    the cache is in use, so the decision is reset to take the new directory.
    """
    global _listening
    import jax
    from jax.experimental.compilation_cache import compilation_cache

    os.makedirs(path, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", os.fspath(path))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    compilation_cache.reset_cache()
    if not _listening:
        jax.monitoring.register_event_listener(_count_cache_event)
        _listening = True


def disable_compilation_cache() -> None:
    """Turn the persistent compilation cache off again (process-wide)."""
    import jax
    from jax.experimental.compilation_cache import compilation_cache

    jax.config.update("jax_compilation_cache_dir", None)
    compilation_cache.reset_cache()
