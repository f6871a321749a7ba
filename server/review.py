"""The review loop's labels and how Fit honours them.

A person reviewing the top anomalies marks rows (`envad label`, the SetLabel RPC):
`normal` when the image is fine (a false alarm) and `anomaly` when it is a real one.
Fit then selects its rows as: the rows its filter matches, less every row labelled as a
known anomaly (the server's `anomaly_labels`, `anomaly` by default), plus the rows
labelled `normal` of the filter's cameras that the filter missed (a reviewed false alarm
from the archive joins a fit on split train).
"""

from __future__ import annotations

from dataclasses import replace

import pyarrow as pa
import pyarrow.compute as pc

from envad.records import NORMAL_LABEL, RowFilter


def fit_rows(store, row_filter: RowFilter, columns: tuple[str, ...],
             anomaly_labels: tuple[str, ...], *, with_vectors: bool = True) -> pa.Table:
    """The rows a Fit on `row_filter` uses (see the module docstring), with their vectors
    unless `with_vectors` is False."""
    table = store.read(row_filter, columns=columns, with_vectors=with_vectors)
    labels = pc.fill_null(table.column("label"), "")
    if anomaly_labels:
        table = table.filter(pc.invert(pc.is_in(labels, value_set=pa.array(anomaly_labels))))
    reviewed = store.read(replace(row_filter, splits=(), labels=(NORMAL_LABEL,)),
                          columns=columns, with_vectors=with_vectors)
    if reviewed.num_rows == 0:
        return table
    missed = reviewed.filter(pc.invert(pc.is_in(reviewed.column("id"),
                                                value_set=table.column("id"))))
    return pa.concat_tables([table, missed]) if missed.num_rows else table
