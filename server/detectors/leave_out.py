"""Scoring the fit rows themselves: each one's own group is left out.

A Fit on a backfilled archive, and `envad scan`, score the very images the detectors
were fitted on. A neighbour detector that scores one of its own fit rows finds the row
itself at distance 0, and camera traps fire bursts of near-identical frames: five frames
of an unseen species are each other's five nearest neighbours, so KNN (k=5) and a narrow
KDE call them dense, that is normal, whatever they show.

A bundle fitted with its rows' ids keeps `FitGroups`: the group of every fit row, where
a group is an event (the frames of one camera ingested with the same event id, such as
a Camtrap DP eventID; else those no more than `gap_s` seconds apart, each to the next:
`envad.event_rule`, the rule of the client's `--group-events` too) and a row with
neither is a group of its own. When a Score query is one of those rows (by id), the
detectors that can leave rows out (KNN, KDE: `Detector.score`'s `leave_out`) score it
against the fit rows outside its group, as if its event had not been fitted on. The
calibration part is scored the same way, so calibrated scores stay on one scale. A
query that is no fit row (a new image) is scored as before. The other detectors (the
trees, OCSVM, LOF, and any detector fitted on a capped sample) are cross-fitted: fitted
once more per fold of the groups (a group's fold is its code modulo CROSS_FIT_FOLDS),
each time without that fold's groups, and a fit row is scored by the fit that never saw
its group (registry.Detector; docs/detectors.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from envad.defaults import DEFAULT_EVENT_GAP_S  # noqa: F401  (its owner; named here too)
from envad.errors import InvalidInput
from envad.event_rule import event_codes

#: no group: a query that is none of the fit rows
NO_GROUP = -1
#: the folds of a cross-fit: each fold's fit sees 3/4 of the fit rows, so its scores stay
#: near the whole fit's scale while it costs 4 fits more (1 + 4 x 3/4 = 4x the rows of
#: the whole fit for a linear detector, 3.25x for a quadratic one, 5x for one whose
#: fit-row cap applies to each fold; measured: `python -m benchmarks.detectors`)
CROSS_FIT_FOLDS = 4
#: a fold with fewer other rows is not fitted (its groups are scored by the whole fit):
#: the fewest rows a bundle fits its detectors on (bundle.MIN_SAMPLES less the
#: calibration part's minimum)
MIN_CROSS_FIT_ROWS = 10


def cross_fit_folds(codes: np.ndarray) -> np.ndarray:
    """The cross-fit fold of each group code (codes count up in a camera's time order,
    so a camera's events are spread over every fold)."""
    return np.asarray(codes, dtype=np.int64) % CROSS_FIT_FOLDS


@dataclass(frozen=True)
class FitGroups:
    """The ids and group codes of the rows a bundle knows as its own (its fit rows, and
    their events' other rows), and the code of each row its detectors were fitted on
    (the fit part, in its order)."""

    ids: np.ndarray          # sorted unicode ids
    codes: np.ndarray        # int64 code per id
    fit_codes: np.ndarray    # int64 code per detector fit row
    gap_s: float

    @staticmethod
    def of_members(member_ids, member_codes, gap_s: float) -> FitGroups:
        """Members sorted by id, their codes renumbered 0..groups-1 (so per-group
        counts stay as small as the bundle); `fit_codes` set by `with_fit_rows`."""
        ids = np.asarray(member_ids).astype(str)
        codes = np.asarray(member_codes, dtype=np.int64)
        if len(ids) != len(codes):
            raise InvalidInput(f"{len(codes)} group codes for {len(ids)} ids")
        codes = np.unique(codes, return_inverse=True)[1].astype(np.int64).reshape(-1)
        order = np.argsort(ids, kind="stable")
        ids, codes = ids[order], codes[order]
        if len(ids) > 1 and np.any(ids[1:] == ids[:-1]):
            raise InvalidInput("the fit rows' ids repeat")
        return FitGroups(ids, codes, np.zeros(0, dtype=np.int64), float(gap_s))

    def with_fit_rows(self, fit_ids) -> FitGroups:
        """The same members, with the detectors' fit rows given by their ids."""
        codes = self.codes_of(fit_ids)
        if np.any(codes == NO_GROUP):
            raise InvalidInput("a fit row's id is not among the bundle's members")
        return FitGroups(self.ids, self.codes, codes, self.gap_s)

    def codes_of(self, query_ids) -> np.ndarray:
        """Group code per query id (NO_GROUP for an id that is no member)."""
        query_ids = np.asarray(query_ids).astype(str)
        out = np.full(len(query_ids), NO_GROUP, dtype=np.int64)
        if not len(self.ids) or not len(query_ids):
            return out
        at = np.minimum(np.searchsorted(self.ids, query_ids), len(self.ids) - 1)
        found = self.ids[at] == query_ids
        out[found] = self.codes[at[found]]
        return out

    def leave_out(self, query_ids) -> tuple[np.ndarray, np.ndarray] | None:
        """(code per query, code per fit row) for `Detector.score`, or None when no query
        is a member (nothing to leave out)."""
        if query_ids is None:
            return None
        codes = self.codes_of(query_ids)
        if not np.any(codes != NO_GROUP):
            return None
        return codes, self.fit_codes

    def describe(self) -> str:
        """How Score treats the fit rows, for a person (BundleInfo.fit_groups)."""
        sizes = np.bincount(self.codes) if len(self.codes) else np.zeros(0, dtype=np.int64)
        groups = int(np.count_nonzero(sizes))
        largest = int(sizes.max()) if len(sizes) else 0
        if self.gap_s <= 0:
            return f"scoring a fit row leaves that row out ({len(self.ids):,} rows)"
        return (f"scoring a fit row leaves its event out (frames of a camera with one "
                f"event id, else <= {self.gap_s:g} s apart): {len(self.ids):,} rows in "
                f"{groups:,} events, largest {largest}")

    def arrays(self) -> dict[str, np.ndarray]:
        """What persistence writes (numpy arrays, no pickles)."""
        return {"ids": self.ids, "codes": self.codes, "fit_codes": self.fit_codes,
                "gap_s": np.asarray(self.gap_s)}

    @staticmethod
    def from_arrays(arrays) -> FitGroups:
        return FitGroups(np.asarray(arrays["ids"]).astype(str),
                         np.asarray(arrays["codes"], dtype=np.int64),
                         np.asarray(arrays["fit_codes"], dtype=np.int64),
                         float(arrays["gap_s"]))



def fit_groups_of(ids, envs, timestamps, fit_ids, gap_s: float, events=None) -> FitGroups:
    """The groups of a Fit: events over every row it matched (`ids`, `envs`,
    `timestamps`, and the events the rows were ingested with, `events`), kept for the
    rows in the same group as a row it fits on (`fit_ids`, the sampled rows when the
    match was sampled)."""
    ids = np.asarray(ids).astype(str)
    codes = event_codes(envs, timestamps, gap_s, events)
    fit_ids = np.asarray(fit_ids).astype(str)
    if len(fit_ids) < len(ids):
        kept = np.isin(codes, codes[np.isin(ids, fit_ids)])
        ids, codes = ids[kept], codes[kept]
    return FitGroups.of_members(ids, codes, gap_s)
