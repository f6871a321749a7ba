"""`--weights imagenet`: read from torch.hub's cache when there, downloaded otherwise;
offline (the download refused: the network is outside this machine) one clear line."""

from __future__ import annotations

import urllib.error

import pytest
import torch
from torchvision.models import resnet18

from envad.client.cli import main
from envad.training.pretrained import cached_imagenet_file, resolve_weights


@pytest.fixture
def empty_torch_home(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch-home"))
    return tmp_path / "torch-home"


def _offline(url, dst, *args, **kwargs):
    raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")


def test_a_local_file_is_passed_on_as_it_is(tmp_path) -> None:
    assert resolve_weights(str(tmp_path / "w.pt")) == str(tmp_path / "w.pt")
    assert resolve_weights(None) is None


def test_imagenet_is_read_from_the_cache_without_a_download(empty_torch_home,
                                                            monkeypatch) -> None:
    cached = cached_imagenet_file()
    assert str(cached).startswith(str(empty_torch_home))
    cached.parent.mkdir(parents=True)
    torch.save(resnet18(weights=None).state_dict(), cached)
    monkeypatch.setattr(torch.hub, "download_url_to_file", _offline)
    assert resolve_weights("imagenet") == str(cached)


def test_imagenet_offline_is_one_line_naming_what_to_do(empty_torch_home, monkeypatch,
                                                        tmp_path, capsys) -> None:
    monkeypatch.setattr(torch.hub, "download_url_to_file", _offline)
    code = main(["train", "--data", str(tmp_path / "no-data"), "--algorithm", "erm",
                 "--out", str(tmp_path / "out"),
                 "--weights", "imagenet", "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code != 0
    assert len(err) == 1, err
    assert "--weights imagenet: cannot download" in err[0]
    assert "--weights FILE" in err[0] and "Traceback" not in err[0]
