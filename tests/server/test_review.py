"""The review loop on a real server: SetLabel relabels stored rows (store and index), and
Fit honours the review labels (server/review.py)."""

from __future__ import annotations

import pytest

from envad.client import EnvadClient
from envad.client.results import ImageInput, IngestInput, RowFilter
from envad.errors import InvalidInput
from tiny_encoder import synthetic_images


def labels_by_id(client: EnvadClient) -> dict[str, str]:
    rows: dict[str, str] = {}
    for batch in client.export(with_vectors=False):
        rows.update(zip(batch.column("id").to_pylist(), batch.column("label").to_pylist(),
                        strict=True))
    return rows


@pytest.fixture
def reviewed(fitted_server):
    """The fitted server plus seven odd images stored under split archive."""
    odd = synthetic_images("odd", 7, seed=5)
    with EnvadClient(fitted_server.address) as client:
        client.ingest([IngestInput(ImageInput(data=d, id=f"odd{i}", env="cam-a"),
                                   split="archive") for i, d in enumerate(odd)])
    return fitted_server, odd


def test_a_reviewed_normal_joins_the_fit_and_its_score_drops(reviewed) -> None:
    server, odd = reviewed
    with EnvadClient(server.address) as client:
        train = RowFilter(splits=("train",))
        before = client.fit(train, detectors=("KNN",))
        flagged = client.score([ImageInput(data=odd[0], env="cam-a")]).results[0]
        false_alarms = [f"odd{i}" for i in range(6)]
        result = client.set_label([*false_alarms, "nope"], "normal")
        assert result.updated == tuple(false_alarms) and result.missing == ("nope",)
        assert labels_by_id(client)["odd0"] == "normal"
        hits = client.search(image=odd[0], k=1).neighbors
        assert (hits[0].id, hits[0].label) == ("odd0", "normal")  # the index knows too
        after = client.fit(train, detectors=("KNN",))
        assert after.n_samples == before.n_samples + 6
        rescored = client.score([ImageInput(data=odd[0], env="cam-a")]).results[0]
    assert flagged.is_anomaly and not rescored.is_anomaly
    assert rescored.detector_scores()["KNN"] < flagged.detector_scores()["KNN"] / 2


def test_a_reviewed_anomaly_leaves_the_fit(reviewed) -> None:
    server, _ = reviewed
    with EnvadClient(server.address) as client:
        everything_filter = RowFilter(splits=("train", "archive"))
        everything = client.fit(everything_filter, detectors=("KNN",))
        assert everything.n_samples == 127
        assert client.set_label(["odd6"], "anomaly").updated == ("odd6",)
        assert client.fit(everything_filter, detectors=("KNN",)).n_samples == 126
        hits = client.search(id="odd6", k=1, row_filter=RowFilter(labels=("anomaly",)))
        assert [h.id for h in hits.neighbors] == ["odd6"]


def test_bad_label_requests_are_refused(reviewed) -> None:
    server, _ = reviewed
    with EnvadClient(server.address) as client:
        with pytest.raises(InvalidInput, match="label must be"):
            client.set_label(["odd0"], "")
        with pytest.raises(InvalidInput, match="at least one id"):
            client.set_label([], "normal")
        # Ingest's rule for labels: what SetLabel stores, a filter can select
        for bad in ("x" * 257, "new\x7fcontent", "tab\there"):
            with pytest.raises(InvalidInput, match="label"):
                client.set_label(["odd0"], bad)
        assert labels_by_id(client)["odd0"] == ""
        assert client.set_label(["odd0"], "y" * 256).updated == ("odd0",)
        selected = [row_id for batch in client.export(RowFilter(labels=("y" * 256,)),
                                                       with_vectors=False)
                    for row_id in batch.column("id").to_pylist()]
        assert selected == ["odd0"]
