"""The camera-trap event rule, one owner for both sides of the wire.

A camera trap fires a burst of frames per trigger. Frames of one camera whose timestamps
follow each other by at most `gap_s` seconds (each to the next, so a long burst chains)
are one event; a frame without a timestamp is an event of its own. The server leaves a
fit row's whole event out when it scores that row (`envad.server.detectors.leave_out`);
the client groups score records into events for one decision per burst
(`envad.client.events`). Both call `event_codes`.
"""

from __future__ import annotations

import numpy as np

from envad.errors import InvalidInput

_MICROSECONDS = 1_000_000
_UNASSIGNED = -1


def event_codes(envs, timestamps, gap_s: float) -> np.ndarray:
    """Event code (0, 1, ...) per row: rows of one camera (`envs`) whose timestamps
    (datetime64, UTC; NaT for none) follow each other by at most `gap_s` seconds share a
    code; a row without a timestamp, and every row when `gap_s` <= 0, has a code of its
    own. Codes of chained events come first, numbered by camera then time."""
    envs = np.asarray(envs).astype(str)
    times = np.asarray(timestamps, dtype="datetime64[us]")
    if len(envs) != len(times):
        raise InvalidInput(f"{len(times)} timestamps for {len(envs)} rows")
    if not np.isfinite(gap_s):
        raise InvalidInput(f"the event gap must be a finite number of seconds, got {gap_s}")
    codes = np.full(len(envs), _UNASSIGNED, dtype=np.int64)
    timed = np.flatnonzero(~np.isnat(times)) if gap_s > 0 else np.zeros(0, dtype=np.int64)
    next_code = 0
    if len(timed):
        ticks = times[timed].astype(np.int64)
        order = timed[np.lexsort((ticks, envs[timed]))]
        ordered_ticks = times[order].astype(np.int64)
        starts = np.ones(len(order), dtype=bool)
        starts[1:] = ((envs[order][1:] != envs[order][:-1])
                      | (np.diff(ordered_ticks) > gap_s * _MICROSECONDS))
        codes[order] = np.cumsum(starts) - 1
        next_code = int(starts.sum())
    alone = np.flatnonzero(codes == _UNASSIGNED)
    codes[alone] = next_code + np.arange(len(alone))
    return codes
