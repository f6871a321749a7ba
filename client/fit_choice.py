"""Which stored rows `envad fit` fits on when the user does not say, and whether there
are enough of them.

The default follows what the user stored: split `train` when any row has it (a
folder-format dataset, `--set-split train`), otherwise every stored row (a plain
`envad backfill FOLDER` stores split `archive`). The server's own default for an empty
filter is `train`, so "every row" is sent as the filter "any of the stored
environments" (GetInfo lists them).

Fewer than MIN_FIT_ROWS rows are refused unless the user insists: calibrated scores are
percentiles among the fit rows (steps of 1/n), and detectors that estimate a covariance
(PCA, OCSVM and LOF5 after scaling) degenerate when there are fewer rows than embedding
dimensions.
"""

from __future__ import annotations

from dataclasses import dataclass

from envad.client.results import RowFilter
from envad.errors import FailedPrecondition, InvalidInput

DEFAULT_SPLIT = "train"
#: The fewest rows `envad fit` accepts without --allow-few-rows (calibration steps of 1%).
MIN_FIT_ROWS = 100


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
    train = RowFilter(envs, (DEFAULT_SPLIT,), labels)
    if count_rows(client, train, 1):
        return FitChoice(train, f"split {DEFAULT_SPLIT} (the default when it is stored; "
                                "--split to choose)")
    stored = tuple(sorted(client.info().env_counts))
    if not stored:
        raise FailedPrecondition("nothing is stored yet: store images of your cameras "
                                 "first (`envad backfill FOLDER`)")
    return FitChoice(RowFilter(envs or stored, (), labels),
                     f"every stored row (no row is in split {DEFAULT_SPLIT}; --split to "
                     "choose)")


def check_enough_rows(client, choice: FitChoice, allow_few: bool) -> str:
    """"" when at least MIN_FIT_ROWS rows match, else a warning (allow_few) or
    InvalidInput naming the minimum."""
    n = count_rows(client, choice.row_filter, MIN_FIT_ROWS)
    if n >= MIN_FIT_ROWS:
        return ""
    if n == 0:
        raise FailedPrecondition(f"no stored rows match {choice.description}: store normal "
                                 "images first (`envad backfill FOLDER`) or choose other "
                                 "rows (--split, --env, --label)")
    problem = (f"only {n} stored rows match {choice.description}; envad fits on at least "
               f"{MIN_FIT_ROWS} (calibrated scores come in steps of 1/{n}, and PCA and "
               "OCSVM degenerate on fewer rows than embedding dimensions)")
    if not allow_few:
        raise InvalidInput(f"{problem}: store more normal images, or pass --allow-few-rows "
                           "to fit anyway")
    return f"warning: {problem}"
