"""Work files land under the data dir, not in whatever directory the user is in
(client/work_dirs.py)."""

from __future__ import annotations

from pathlib import Path

from client_archives import make_image_tree
from envad.client.cli import main
from envad.client.work_dirs import checkpoint_dir, user_data_dir, work_dir


def test_backfill_checkpoints_go_under_the_servers_data_dir(envad_server, tmp_path,
                                                            monkeypatch) -> None:
    tree = make_image_tree(tmp_path / "tree")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert main(["backfill", str(tree), "--no-progress",
                 "--server", envad_server.address]) == 0
    journals = list((Path(envad_server.data_dir) / "checkpoints").glob("backfill-tree-*.jsonl"))
    assert len(journals) == 1
    assert list(elsewhere.iterdir()) == []


def test_a_data_dir_not_on_this_machine_falls_back_to_the_users(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("ENVAD_HOME", str(tmp_path / "home-envad"))
    assert work_dir("/srv/envad-on-another-host") == tmp_path / "home-envad"
    assert work_dir(None) == tmp_path / "home-envad"
    assert work_dir("relative/var/envad") == tmp_path / "home-envad"
    assert checkpoint_dir(tmp_path) == tmp_path / "checkpoints"


def test_the_users_data_dir_follows_xdg(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("ENVAD_HOME", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert user_data_dir() == tmp_path / "xdg" / "envad"
    monkeypatch.delenv("XDG_DATA_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "h"))
    assert user_data_dir() == tmp_path / "h" / ".local" / "share" / "envad"
