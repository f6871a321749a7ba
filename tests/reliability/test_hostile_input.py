"""Hostile and faulty requests against a real server: each is refused with a named,
one-line INVALID_ARGUMENT-class reason, and never costs another client (or another item
of the same request) anything."""

from __future__ import annotations

import threading

import grpc
import pytest
from google.protobuf.timestamp_pb2 import Timestamp

from envad.server.limits import MAX_ERROR_CHARS, MAX_FILTER_VALUES
from envad.v1 import envad_pb2 as pb
from tiny_encoder import synthetic_images

IMAGES = synthetic_images("normal", 40, seed=7)


def items(ids, *, env="cam-a", label="", split="archive", timestamps=None):
    return [pb.IngestItem(image=pb.Image(data=IMAGES[i % len(IMAGES)], id=row_id, env=env,
                                         timestamp=timestamps[i] if timestamps else None),
                          label=label, split=split)
            for i, row_id in enumerate(ids)]


def ingest(stub, item_list, chunk=10):
    return stub.Ingest(iter([pb.IngestRequest(items=item_list[i:i + chunk])
                             for i in range(0, len(item_list), chunk)]), timeout=120)


def refusal(call) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as caught:
        call()
    details = caught.value.details() or ""
    assert "\n" not in details and len(details) <= MAX_ERROR_CHARS, details[:200]
    return caught.value


def test_one_clients_bad_ids_never_fail_another_clients_items(stub):
    """Item 1: ids with a control character fail alone, at the request; the clean
    client's 400 items and the hostile client's good items are all stored."""
    clean_ids = [f"clean-{i}" for i in range(400)]
    hostile_ids = [f"bad\n{i}" if i % 4 == 0 else f"hostile-ok-{i}" for i in range(200)]
    summaries = {}

    def run(name, ids):
        summaries[name] = ingest(stub, items(ids), chunk=8)

    threads = [threading.Thread(target=run, args=("clean", clean_ids)),
               threading.Thread(target=run, args=("hostile", hostile_ids))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    clean, hostile = summaries["clean"], summaries["hostile"]
    assert (clean.inserted + clean.duplicates, clean.failed) == (400, 0), clean.failures[:3]
    assert hostile.failed == 50 and hostile.inserted + hostile.duplicates == 150
    assert {f.index for f in hostile.failures} == set(range(0, 200, 4))
    assert all(f.code == "INVALID_ARGUMENT" and "control character" in f.message
               for f in hostile.failures)


@pytest.mark.parametrize("field", ["env", "label", "split"])
def test_values_ingest_accepts_can_be_filtered_on(stub, field):
    """Item 12: one rule for stored values and filter values. A name with a tab is
    refused for its item at Ingest (it could never be filtered on); a clean one is stored
    and its filter works."""
    bad, good = "tab\there", f"ok-{field}"
    summary = ingest(stub, items([f"{field}-bad"], **{field: bad})
                     + items([f"{field}-good"], **{field: good}))
    assert summary.failed == 1 and summary.failures[0].index == 0
    assert "control character" in summary.failures[0].message
    key = {"env": "envs", "label": "labels", "split": "splits"}[field]
    chunks = list(stub.Export(pb.ExportRequest(filter=pb.Filter(**{key: [good]}),
                                               format=pb.EXPORT_FORMAT_ROWS),
                              timeout=30))
    rows = [r for c in chunks for r in c.rows.rows]
    assert [r.id for r in rows] == [f"{field}-good"]
    error = refusal(lambda: list(stub.Export(
        pb.ExportRequest(filter=pb.Filter(**{key: [bad]})), timeout=30)))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT


@pytest.mark.parametrize("rpc", ["Export", "Fit", "Search", "Score"])
def test_filter_lists_are_capped(stub, rpc):
    """Item 2: a filter longer than MAX_FILTER_VALUES is refused before any query is
    built; one at the limit is served."""
    too_many = pb.Filter(envs=[f"env-{i}" for i in range(MAX_FILTER_VALUES + 1)])
    calls = {
        "Export": lambda f: list(stub.Export(pb.ExportRequest(filter=f), timeout=60)),
        "Fit": lambda f: stub.Fit(pb.FitRequest(filter=f, no_activate=True,
                                                allow_few_rows=True), timeout=60),
        "Search": lambda f: stub.Search(pb.SearchRequest(
            image=IMAGES[0], filter=f), timeout=60),
        "Score": lambda f: stub.Score(pb.ScoreRequest(
            images=[pb.Image(data=IMAGES[0])], neighbor_filter=f), timeout=60),
    }
    error = refusal(lambda: calls[rpc](too_many))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert f"limit of {MAX_FILTER_VALUES}" in error.details()
    at_limit = pb.Filter(envs=["cam-a"] + [f"env-{i}" for i in range(MAX_FILTER_VALUES - 1)])
    if rpc != "Fit":
        calls[rpc](at_limit)


def test_out_of_range_timestamp_fails_its_item_only(stub):
    """Item 5: a timestamp outside 0001..9999 is INVALID_ARGUMENT for that item, named by
    its index; the other items of the stream are stored."""
    far = Timestamp(seconds=300_000_000_000)
    fine = Timestamp(seconds=1_700_000_000)
    ids = [f"ts-{i}" for i in range(12)]
    stamps = [fine] * 12
    stamps[9] = far
    summary = ingest(stub, items(ids, timestamps=stamps), chunk=4)
    assert summary.failed == 1 and summary.inserted + summary.duplicates == 11
    failure = summary.failures[0]
    assert (failure.index, failure.id, failure.code) == (9, "ts-9", "INVALID_ARGUMENT")
    assert "timestamp" in failure.message
    scored = stub.Score(pb.ScoreRequest(images=[pb.Image(data=IMAGES[0], timestamp=far),
                                                pb.Image(data=IMAGES[1])]), timeout=60)
    assert scored.results[0].error.code == "INVALID_ARGUMENT"
    assert not scored.results[1].HasField("error")


def test_sub_microsecond_timestamp_digits_are_cut_as_documented(stub):
    """Timestamps are kept to the microsecond (docs/api.md's limits): a timestamp with
    nanoseconds is stored, and comes back with its digits below a microsecond cut."""
    stamp = Timestamp(seconds=1_700_000_000, nanos=123_456_789)
    summary = ingest(stub, items(["ts-nanos"], env="cam-nanos", timestamps=[stamp]))
    assert summary.inserted + summary.duplicates == 1 and summary.failed == 0
    rows = [row for chunk in stub.Export(pb.ExportRequest(
                filter=pb.Filter(envs=["cam-nanos"]), format=pb.EXPORT_FORMAT_ROWS,
                without_vectors=True), timeout=60)
            for row in chunk.rows.rows]
    assert [(r.id, r.timestamp.seconds, r.timestamp.nanos) for r in rows] == \
        [("ts-nanos", 1_700_000_000, 123_456_000)]


def test_score_stream_answers_every_request_with_an_error_where_one_is_bad(stub):
    """Item 7: an empty request and a top_k of 101 get their own error response; the
    requests after them are still scored."""
    good = pb.ScoreRequest(images=[pb.Image(data=IMAGES[0], id="stream-ok")])
    requests = [good, pb.ScoreRequest(), pb.ScoreRequest(images=good.images, top_k=101),
                pb.ScoreRequest(images=good.images, neighbor_filter=pb.Filter(envs=["a\x00"])),
                good]
    responses = list(stub.ScoreStream(iter(requests), timeout=60))
    assert len(responses) == 5
    assert [r.HasField("error") for r in responses] == [False, True, True, True, False]
    assert [r.error.index for r in responses[1:4]] == [1, 2, 3]
    assert all(r.error.code == "INVALID_ARGUMENT" for r in responses[1:4])
    assert "top_k" in responses[2].error.message
    assert responses[4].results[0].id == "stream-ok"


def test_error_messages_never_echo_unbounded_input(stub):
    """Item 8: a 1 MB id or model id and a filter of long values come back as their own
    status (not RESOURCE_EXHAUSTED from oversized metadata), one short line."""
    huge = "x" * 1_000_000
    error = refusal(lambda: stub.Search(pb.SearchRequest(id=huge), timeout=30))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT and "512" in error.details()
    error = refusal(lambda: stub.ActivateModel(pb.ActivateModelRequest(model_id=huge),
                                               timeout=30))
    assert error.code() == grpc.StatusCode.NOT_FOUND
    # a caller's value is quoted up to 64 characters, and no server path is named
    assert len(error.details()) < 400 and "1000000 chars" in error.details()
    assert "x" * 60 in error.details() and "x" * 64 not in error.details()
    assert "/" not in error.details().split("known models")[0]
    long_values = pb.Filter(envs=[f"{i:04d}" + "e" * 250 for i in range(MAX_FILTER_VALUES)])
    error = refusal(lambda: stub.Fit(pb.FitRequest(filter=long_values), timeout=60))
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION


def test_huge_query_vector_is_refused(stub):
    """Item 16: values whose squared distance overflows float32 are refused instead of
    answering OK with no neighbours."""
    error = refusal(lambda: stub.Search(pb.SearchRequest(
        vector=pb.Vector(values=[3e38] * 16)), timeout=30))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "overflows" in error.details()


def _raw_call(shared_server, method: str, payload: bytes, *, stream: bool = False):
    channel = shared_server.channel()
    if stream:
        call = channel.stream_unary(f"/envad.v1.AnomalyService/{method}")
        return lambda: call(iter([payload]), timeout=30)
    return lambda: channel.unary_unary(f"/envad.v1.AnomalyService/{method}")(payload,
                                                                               timeout=30)


@pytest.mark.parametrize("method,payload,stream", [
    ("Search", b"\x1a\x02\xff\xfe", False),            # id = invalid UTF-8
    ("Search", b"\x1a\x10ab", False),                    # truncated field
    ("Ingest", b"\x0a\x05\x0a\x03\x1a\x01\xff", True),  # an item's image id invalid UTF-8
])
def test_unparsable_request_is_invalid_argument_without_traceback(shared_server, method,
                                                                  payload, stream):
    """Item 10: a request that does not parse is INVALID_ARGUMENT naming the method, and
    the server logs no traceback for it."""
    error = refusal(_raw_call(shared_server, method, payload, stream=stream))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert method in error.details()
    log = shared_server.log_path.read_text()
    assert "Traceback" not in log and "Exception deserializing" not in log


def test_cancelled_ingest_is_not_logged_as_an_internal_error(shared_server, stub):
    """Item 11: a client cancelling its Ingest mid-stream is logged as a cancellation,
    with no traceback and no "internal error"."""
    sent = threading.Event()

    def requests():
        for i in range(1000):
            yield pb.IngestRequest(items=items([f"cancel-{i}"]))
            sent.set()
            threading.Event().wait(0.05)

    call = stub.Ingest.future(requests(), timeout=60)
    assert sent.wait(30)
    threading.Event().wait(0.3)
    call.cancel()
    with pytest.raises(grpc.FutureCancelledError):
        call.result()
    threading.Event().wait(1.0)   # the server notices the cancellation and logs it
    log = shared_server.log_path.read_text()
    assert "internal error" not in log and "Traceback" not in log
