"""The review loop's labels and how Fit honours them.

A person reviewing the top anomalies marks rows (`envad label`, the SetLabel RPC):
`normal` when the image is fine (a false alarm) and `anomaly` when it is new content.
Fit then selects its rows as: the rows its filter matches, plus the rows labelled
`normal` or as a known anomaly (the server's `anomaly_labels`, `anomaly` by default) of
the filter's cameras that the filter missed (a reviewed image from the archive counts in
a fit on split train). Known anomalies come with the label ANOMALY_LABEL: the bundle
never fits on them nor on the frames of their events, and remembers them, so the
labelled image and its content rise (server/detectors/reviewed.py).
"""

from __future__ import annotations

from dataclasses import replace

import pyarrow as pa
import pyarrow.compute as pc

from envad.records import ANOMALY_LABEL, NORMAL_LABEL, RowFilter


def fit_rows(store, row_filter: RowFilter, columns: tuple[str, ...],
             anomaly_labels: tuple[str, ...], *, with_vectors: bool = True) -> pa.Table:
    """The rows a Fit on `row_filter` uses (see the module docstring), with their vectors
    unless `with_vectors` is False."""
    table = store.read(row_filter, columns=columns, with_vectors=with_vectors)
    reviewed = store.read(replace(row_filter, splits=(), labels=(NORMAL_LABEL, *anomaly_labels)),
                          columns=columns, with_vectors=with_vectors)
    if reviewed.num_rows:
        missed = reviewed.filter(pc.invert(pc.is_in(reviewed.column("id"),
                                                    value_set=table.column("id"))))
        if missed.num_rows:
            table = pa.concat_tables([table, missed])
    return _known_anomalies_marked(table, anomaly_labels)


def _known_anomalies_marked(table: pa.Table, anomaly_labels: tuple[str, ...]) -> pa.Table:
    """`table` with every known anomaly labelled ANOMALY_LABEL, and ANOMALY_LABEL taken off
    rows that carry it when the server does not count it as one."""
    labels = pc.fill_null(table.column("label"), "")
    known = (pc.is_in(labels, value_set=pa.array(anomaly_labels, pa.string()))
             if anomaly_labels else pa.array([False] * table.num_rows))
    kept = pc.if_else(pc.equal(labels, ANOMALY_LABEL), "", labels)
    marked = pc.if_else(known, ANOMALY_LABEL, kept)
    return table.set_column(table.schema.get_field_index("label"), "label", marked)
