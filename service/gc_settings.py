"""How the long-lived processes (`ett serve`, `ett aggregate`) run Python's cyclic garbage
collector."""

from __future__ import annotations

import gc

# Allocations (net of frees) between two young collections; Python's default is 700.
YOUNG_THRESHOLD = 50_000


def tune_gc() -> None:
    """Keep what start-up built out of every collection, and collect the young rarely.

    Everything built so far lives as long as the process: frozen, it is never scanned
    again; the full collections that scanned it stalled `ett serve`'s event loop for
    ~50 ms at a time. A thousand requests in flight hold tens of thousands of container
    objects: every 700 allocations the collector walked them and promoted them, and the
    promoted ones set off a full collection every few seconds, 10-20% of the CPU of a
    1-event request. The aggregator's passes fare the same: each chunk of jobs leaves its
    running jobs' snapshots and rows in the cache, and at 700 the collector walked them
    again after every chunk (docs/performance.md, issues 29 and 30). Nearly all of those
    objects are freed by reference counting long before 50,000 more allocations.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, 20, 100)
