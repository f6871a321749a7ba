"""benchmarks.bare_stream: a server process sends the given message sizes; the client
receives every byte."""

from __future__ import annotations

from benchmarks.bare_stream import BareStream


def test_the_stream_delivers_every_message_of_the_given_sizes(tmp_path):
    sizes = [1, 70_000, 3 * 1024 * 1024]
    with BareStream(sizes, tmp_path) as bare:
        assert bare.total == sum(sizes)
        bare.time_stream()                     # raises unless every byte arrived
        messages = list(bare.call(b"", timeout=60))
    assert [len(m) for m in messages] == sizes
    assert bare.process.returncode == 0        # stopped when its stdin closed
