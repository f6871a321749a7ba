"""The server-memory benchmark: every stage measured on a real `envad serve`, in order."""

from __future__ import annotations

import json

from benchmarks import server_memory


def test_every_stage_is_measured_in_order_and_a_server_holds_more_than_its_modules(
        tmp_path, capsys):
    server_memory.main(["--rows", "150", "--calls", "1", "--work", str(tmp_path)])
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["stage"] for r in records] == [
        "modules", "serving an empty store", "serving the rows, no Fit",
        "default pipeline fitted", "the paper's eight fitted"]
    assert [r["rows"] for r in records] == [0, 0, 150, 150, 150]
    previous = 0
    for record in records:
        assert record["added_bytes"] == record["VmRSS_bytes"] - previous
        assert 0 < record["RssAnon_bytes"] < record["VmRSS_bytes"]
        assert 0 < record["RssFile_bytes"] < record["VmRSS_bytes"]
        previous = record["VmRSS_bytes"]
    # a serving process holds what an import does not: the encoder, gRPC's threads
    assert records[1]["VmRSS_bytes"] > records[0]["VmRSS_bytes"]
    assert not list(tmp_path.iterdir())     # the stores lived in a folder it removed
