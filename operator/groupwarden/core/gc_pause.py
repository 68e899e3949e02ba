"""Pausing Python's cyclic garbage collector while a pass builds objects that live on."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def gc_paused() -> Iterator[None]:
    """A pass that allocates millions of small objects that live until its end (a gather, a
    decision, the fleet audit's answers): the cyclic garbage collector would scan the growing heap
    again and again for nothing (seconds at 100k groups). Reference counting still frees
    everything that is dropped; cycles wait for the end."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
