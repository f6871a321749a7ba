"""Helpers for tests of events: timestamps at offsets, and events as sets of rows."""

from __future__ import annotations

import numpy as np


def times(*seconds) -> np.ndarray:
    """Timestamps at these offsets in seconds (None: no timestamp)."""
    base = np.datetime64("2024-06-01T06:00:00", "us")
    return np.array([np.datetime64("NaT", "us") if s is None
                     else base + np.timedelta64(int(s * 1e6), "us") for s in seconds])


def same_groups(codes) -> list[set[int]]:
    """The rows of each event, as sets (the codes' values are arbitrary)."""
    return sorted(({int(i) for i in np.flatnonzero(codes == c)} for c in np.unique(codes)),
                  key=min)
