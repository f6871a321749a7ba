"""The camera-trap event rule, one owner for both sides of the wire.

A camera trap fires a burst of frames per trigger. Frames of one camera that name the
same event (such as a Camtrap DP eventID) are one event; of the others, frames of one
camera whose timestamps follow each other by at most `gap_s` seconds (each to the next,
so a long burst chains) are one event, and a frame without a timestamp is an event of
its own. The server leaves a fit row's whole event out when it scores that row
(`envad.server.detectors.leave_out`); the client groups score records into events for
one decision per burst (`envad.client.events`). Both call `event_codes`.
"""

from __future__ import annotations

import numpy as np

from envad.errors import InvalidInput

_MICROSECONDS = 1_000_000
_UNASSIGNED = -1


def event_codes(envs, timestamps, gap_s: float, names=None) -> np.ndarray:
    """Event code (0, 1, ...) per row. Rows of one camera (`envs`) with the same
    non-empty name (`names`, optional) share a code; of the unnamed rows, those of one
    camera whose timestamps (datetime64, UTC; NaT for none) follow each other by at most
    `gap_s` seconds share a code. A row with neither, and every row when `gap_s` <= 0,
    has a code of its own. Named events come first (by camera, then name), then chained
    ones (by camera, then time)."""
    envs = np.asarray(envs).astype(str)
    times = np.asarray(timestamps, dtype="datetime64[us]")
    if len(envs) != len(times):
        raise InvalidInput(f"{len(times)} timestamps for {len(envs)} rows")
    if not np.isfinite(gap_s):
        raise InvalidInput(f"the event gap must be a finite number of seconds, got {gap_s}")
    codes = np.full(len(envs), _UNASSIGNED, dtype=np.int64)
    next_code = 0
    if names is not None and gap_s > 0:
        next_code = _name_codes(envs, names, codes)
    unassigned = codes == _UNASSIGNED
    timed = (np.flatnonzero(unassigned & ~np.isnat(times)) if gap_s > 0
             else np.zeros(0, dtype=np.int64))
    if len(timed):
        ticks = times[timed].astype(np.int64)
        order = timed[np.lexsort((ticks, envs[timed]))]
        ordered_ticks = times[order].astype(np.int64)
        starts = np.ones(len(order), dtype=bool)
        starts[1:] = ((envs[order][1:] != envs[order][:-1])
                      | (np.diff(ordered_ticks) > gap_s * _MICROSECONDS))
        codes[order] = next_code + np.cumsum(starts) - 1
        next_code += int(starts.sum())
    alone = np.flatnonzero(codes == _UNASSIGNED)
    codes[alone] = next_code + np.arange(len(alone))
    return codes


def _name_codes(envs: np.ndarray, names, codes: np.ndarray) -> int:
    """Set the code of every row with a non-empty name (codes 0.. by camera, then name);
    returns the number of named events."""
    names = np.array(["" if n is None else n for n in names], dtype=object).astype(str)
    if len(names) != len(envs):
        raise InvalidInput(f"{len(names)} event names for {len(envs)} rows")
    named = np.flatnonzero(names != "")
    if not len(named):
        return 0
    pairs = np.char.add(np.char.add(envs[named], "\x00"), names[named])
    distinct, inverse = np.unique(pairs, return_inverse=True)
    codes[named] = inverse.reshape(-1)
    return len(distinct)
