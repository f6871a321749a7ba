"""The README documents every server setting, and its Python example runs."""

from __future__ import annotations

import re
from pathlib import Path

from envad.server.config import describe

ROOT = Path(__file__).resolve().parents[1]


def test_readme_lists_every_setting():
    readme = (ROOT / "README.md").read_text()
    for name, variable, _ in describe():
        assert f"`{name}`" in readme and f"`{variable}`" in readme, name


def test_readme_first_command_is_make_demo():
    readme = (ROOT / "README.md").read_text()
    first = re.search(r"```bash\n(.+?)\n", readme).group(1)
    assert first.startswith("make demo")


def test_readme_python_example_runs_against_a_server(fitted_server, tmp_path, monkeypatch):
    readme = (ROOT / "README.md").read_text()
    example = re.search(r"```python\n(import grpc\n.+?)```", readme, re.S).group(1)
    from tiny_encoder import synthetic_images

    (tmp_path / "IMG_0042.JPG").write_bytes(synthetic_images("odd", 1)[0])
    monkeypatch.chdir(tmp_path)
    example = example.replace("127.0.0.1:50051", fitted_server.address)
    namespace: dict = {}
    exec(compile(example, "README.md", "exec"), namespace)
    assert namespace["result"].is_anomaly
    assert namespace["reply"].provenance.bundle_id
