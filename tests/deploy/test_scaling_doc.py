"""docs/scaling.md's commands are `envad`'s: the plain-process servers load with the
settings they claim (one writer, readers naming it), every client command parses, and
the files it points to exist."""

from __future__ import annotations

import re
import shlex

import pytest
from deployed import ROOT, Server, served_config

from envad.client.cli import build_parser

DOC = ROOT / "docs" / "scaling.md"


def commands() -> list[tuple[int, list[str]]]:
    """(line of its block, argv after `envad`) of every `envad ...` command in the doc's
    bash blocks, continuation lines joined and `a && b` split."""
    text = DOC.read_text()
    found = []
    for block in re.finditer(r"```bash\n(.*?)```", text, re.S):
        line = text[:block.start()].count("\n") + 1
        for command in re.sub(r"\\\n\s*", " ", block[1]).splitlines():
            for part in command.split("&&"):
                words = shlex.split(part, comments=True)
                if words[:1] == ["envad"]:
                    found.append((line, words[1:]))
    return found


SERVERS = [Server(f"docs/scaling.md:{line}", argv, {"AWS_ACCESS_KEY_ID": "id"}, {})
           for line, argv in commands() if argv[:1] == ["serve"]]


def test_the_plain_processes_are_one_writer_and_its_readers(monkeypatch) -> None:
    configs = [served_config(server, monkeypatch) for server in SERVERS]
    assert sorted(c.role for c in configs) == ["reader", "writer"]
    (writer,) = [c for c in configs if c.role == "writer"]
    assert writer.writer_address.endswith(f":{writer.port}")
    assert {c.writer_address for c in configs} == {writer.writer_address}
    assert len({(str(c.data_dir), str(c.models_dir)) for c in configs}) == 1
    assert all(c.remote and c.host == "0.0.0.0" for c in configs)


CLIENT_COMMANDS = [(line, argv) for line, argv in commands() if argv[:1] != ["serve"]]


@pytest.mark.parametrize("line,argv", CLIENT_COMMANDS,
                         ids=[f"{argv[0]}@{line}" for line, argv in CLIENT_COMMANDS])
def test_client_commands_parse(line, argv) -> None:
    try:
        build_parser().parse_args(argv)
    except SystemExit:
        pytest.fail(f"docs/scaling.md line {line}: `envad {shlex.join(argv)}` does not parse")


def test_linked_files_exist() -> None:
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", DOC.read_text()):
        assert (DOC.parent / target).exists(), target
