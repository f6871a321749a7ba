"""The Python example of docs/client.md runs against a real server."""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow.parquet as pq

from client_archives import png_bytes

DOC = Path(__file__).resolve().parents[2] / "docs" / "client.md"


def python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def test_client_doc_example_runs(envad_server, tmp_path, monkeypatch, capsys) -> None:
    (block,) = python_blocks(DOC.read_text())
    images = tmp_path / "images"
    images.mkdir()
    for n in range(24):
        (images / f"img{n:02d}.png").write_bytes(png_bytes(n, 32))
    monkeypatch.setenv("ENVAD_SERVER", envad_server.address)
    monkeypatch.chdir(tmp_path)
    exec(compile(block, str(DOC), "exec"), {"DEMO_IMAGES": str(images)})
    out = capsys.readouterr().out
    assert out.startswith("24 new rows, 0 already stored")
    assert "evidence:" in out
    assert pq.read_table(tmp_path / "embeddings.parquet").num_rows == 12
