"""Which stored rows `envad fit` fits on when the user does not say, and whether there
are enough of them.

The default follows what the user stored: split FIT_SPLIT (`train`) when any row has it
(a folder-format dataset, `--set-split train`), otherwise every stored row (a plain
`envad backfill FOLDER` stores split INGEST_SPLIT, `archive`). The server's own default
for an empty filter is FIT_SPLIT too, so "every row" is sent as the filter "any of the
stored environments" (GetInfo lists them). Both splits are owned by `envad.records`.

Fewer than MIN_FIT_ROWS rows are refused by the server's Fit itself (the one owner of
that rule, `envad.records.MIN_FIT_ROWS`) unless the request allows them
(`--allow-few-rows`); the commands then print a warning.
"""

from __future__ import annotations

from dataclasses import dataclass

from envad.client.results import RowFilter
from envad.errors import FailedPrecondition
from envad.records import FIT_SPLIT, MIN_FIT_ROWS

__all__ = ["FIT_SPLIT", "MIN_FIT_ROWS", "FitChoice", "choose_fit_rows", "count_rows",
           "few_rows_warning"]


@dataclass(frozen=True)
class FitChoice:
    """The rows to fit on and, in words, why these."""

    row_filter: RowFilter
    description: str


def count_rows(client, row_filter: RowFilter, up_to: int) -> int:
    """Stored rows matching `row_filter`, counted up to `up_to` (reads metadata only)."""
    seen = 0
    batches = client.export(row_filter, batch_size=max(up_to, 1), with_vectors=False)
    try:
        for batch in batches:
            seen += batch.num_rows
            if seen >= up_to:
                break
    finally:
        batches.close()
    return min(seen, up_to)


def choose_fit_rows(client, envs: tuple[str, ...] = (), splits: tuple[str, ...] = (),
                    labels: tuple[str, ...] = ()) -> FitChoice:
    """The rows `envad fit` uses: the given filter, else split train when stored, else
    every stored row (FailedPrecondition when nothing is stored)."""
    if splits:
        return FitChoice(RowFilter(envs, splits, labels), f"split {', '.join(splits)}")
    train = RowFilter(envs, (FIT_SPLIT,), labels)
    if count_rows(client, train, 1):
        return FitChoice(train, f"split {FIT_SPLIT} (the default when it is stored; "
                                "--split to choose)")
    stored = tuple(sorted(client.info().env_counts))
    if not stored:
        raise FailedPrecondition("nothing is stored yet: store images of your cameras "
                                 "first (`envad backfill FOLDER`)")
    return FitChoice(RowFilter(envs or stored, (), labels),
                     f"every stored row (no row is in split {FIT_SPLIT}; --split to "
                     "choose)")


def few_rows_warning(n_samples: int) -> str:
    """A warning for a fit that was allowed fewer than MIN_FIT_ROWS rows and used them
    ("" otherwise); the refusal itself is the server's Fit's."""
    if n_samples >= MIN_FIT_ROWS:
        return ""
    return (f"warning: only {n_samples} stored rows were fitted on (fewer than "
            f"{MIN_FIT_ROWS}): calibrated scores rest on a handful of held-out rows")
