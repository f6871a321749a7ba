"""benchmarks.store_requests on a small store: each operation's requests are counted with
envad's settings and the reference's, and envad's read asks for no listing."""

from __future__ import annotations

import json

from moto.moto_server import werkzeug_app

from benchmarks import store_requests


def test_each_operation_is_counted_both_ways(capsys):
    answer = werkzeug_app.DomainDispatcherApplication.__call__
    store_requests.main(["--rows", "200", "--rounds", "3"])
    assert werkzeug_app.DomainDispatcherApplication.__call__ is answer   # counting undone
    records = {r["operation"]: r for r in map(json.loads, capsys.readouterr().out.splitlines())}
    assert len(records) == 3
    for record in records.values():
        assert record["benchmark"] == "store_requests" and record["rows"] == 200
        assert 0 < record["requests"] < record["reference_requests"]
    read = records["read 40 re-ranking candidates by row id"]
    assert read["listings"] == 0 and read["reference_listings"] > 0
    assert records["write a small object (lease, statistics)"]["requests"] == 1
