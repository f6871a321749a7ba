"""`envad evaluate --weights FILE`: the frozen-features pretraining (the paper's "Other
dataset" column), scored like every other one, from weights the test writes (nothing
downloads)."""

from __future__ import annotations

import json
import math
import urllib.error

import numpy as np
import pytest
import torch
from torchvision.models import resnet18

from envad.client.cli import main
from envad.errors import InvalidInput
from envad.server.encoder import OnnxEncoder
from envad.training.data import load_dataset
from envad.training.evaluate import EvalConfig, _run_dir, run_evaluation
from envad.training.protocol import ENSEMBLE, FROZEN
from envad.training.run_files import ENCODER_FILE

DETECTORS = ("KNN", "PCA")
ORDERS = "shuffled,normal-first"


def _write_weights(path, seed: int):
    """A torchvision ResNet-18 state dict of its own random init, BatchNorm statistics
    moved off their defaults so that the file's buffers count too."""
    torch.manual_seed(seed)
    net = resnet18(weights=None)
    state = net.state_dict()                    # the module's own tensors
    for name, tensor in state.items():
        if name.endswith("running_mean"):
            tensor.normal_(0, 0.1)
        elif name.endswith("running_var"):
            tensor.uniform_(0.5, 1.5)
    torch.save(state, path)
    return net.eval()


@pytest.fixture(scope="module")
def frozen_report(tiny_photodigits, tmp_path_factory):
    """(weights' network, weights file, report dir) of `envad evaluate --weights FILE`
    with `random` beside it."""
    root = tmp_path_factory.mktemp("frozen")
    net = _write_weights(root / "a.pt", 1)
    out = root / "report"
    code = main(["evaluate", "--data", str(tiny_photodigits), "--algorithms", "random",
                 "--detectors", ",".join(DETECTORS), "--seeds", "0",
                 "--stylist-fractions", "", "--orders", ORDERS,
                 "--weights", str(root / "a.pt"), "--out", str(out)])
    assert code == 0
    return net, root / "a.pt", out


def test_weights_add_the_frozen_row_scored_like_the_others(frozen_report) -> None:
    _, _, out = frozen_report
    report = json.loads((out / "results.json").read_text())
    assert report["config"]["algorithms"] == ["random", FROZEN]
    frozen = next(r for r in report["runs"] if r["algorithm"] == FROZEN)
    plain = frozen["variants"]["plain"]
    assert set(plain["ood"]) == set(DETECTORS) | {ENSEMBLE}
    aucs = [v["pooled"] for split in ("ood", "id") for v in plain[split].values()]
    aucs += [v["pooled"] for v in plain["orders"].values()]
    assert set(plain["orders"]) == {"shuffled", "normal-first", "worst"}
    assert all(math.isfinite(a) and 0.0 <= a <= 1.0 for a in aucs)
    assert "weights_sha256" in frozen["config"]
    table = (out / "table.md").read_text()
    assert f"| detector | random | {FROZEN} |" in table
    assert f"| {FROZEN} |" in table              # the summary and the orders tables


def test_the_frozen_encoder_is_the_weights_as_they_are(frozen_report, tiny_photodigits,
                                                       tmp_path) -> None:
    """The exported encoder embeds as torchvision's own network with the file's
    weights (7x7 stem, ImageNet normalisation, no classifier): nothing was trained."""
    net, weights, out = frozen_report
    config = EvalConfig(data=str(tiny_photodigits), algorithms=(), detectors=DETECTORS,
                        seeds=(0,), out=out, weights=str(weights))
    encoder = OnnxEncoder(_run_dir(config, FROZEN, 0) / ENCODER_FILE)
    dataset = load_dataset(str(tiny_photodigits))
    images = dataset.images(dataset.indices(split="test")[:8], encoder.input_size)
    net.fc = torch.nn.Identity()
    x = torch.from_numpy(images).permute(0, 3, 1, 2).float() / 255.0
    mean = torch.tensor((0.485, 0.456, 0.406)).view(1, 3, 1, 1)
    std = torch.tensor((0.229, 0.224, 0.225)).view(1, 3, 1, 1)
    with torch.no_grad():
        expected = net((x - mean) / std).numpy()
    np.testing.assert_allclose(encoder.embed(images), expected, rtol=1e-3, atol=1e-4)


def test_other_weights_give_other_scores(frozen_report, tiny_photodigits, tmp_path) -> None:
    """The same evaluation with another state dict scores other embeddings; the first
    report's cached frozen result is not reused for them."""
    _, _, first = frozen_report
    _write_weights(tmp_path / "b.pt", 2)
    config = EvalConfig(data=str(tiny_photodigits), algorithms=(), detectors=DETECTORS,
                        seeds=(0,), out=tmp_path / "report", stylist_fractions=(),
                        orders=tuple(ORDERS.split(",")), weights=str(tmp_path / "b.pt"))
    run_evaluation(config, progress=False)
    a = np.load(first / "results" / f"{FROZEN}-s0.npz")
    b = np.load(tmp_path / "report" / "results" / f"{FROZEN}-s0.npz")
    np.testing.assert_array_equal(a["labels"], b["labels"])
    assert not np.allclose(a["score:KNN"], b["score:KNN"])


def test_frozen_without_a_weights_file_is_refused(tiny_photodigits, tmp_path) -> None:
    config = EvalConfig(data=str(tiny_photodigits), algorithms=(FROZEN,),
                        detectors=DETECTORS, seeds=(0,), out=tmp_path)
    with pytest.raises(InvalidInput, match="--weights FILE"):
        run_evaluation(config, progress=False)
    missing = EvalConfig(data=str(tiny_photodigits), algorithms=(), detectors=DETECTORS,
                         seeds=(0,), out=tmp_path, weights=str(tmp_path / "none.pt"))
    with pytest.raises(InvalidInput, match="none.pt does not exist"):
        run_evaluation(missing, progress=False)


def test_imagenet_offline_is_the_same_one_line_as_train(tmp_path, monkeypatch,
                                                        capsys) -> None:
    def offline(url, dst, *args, **kwargs):
        raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")

    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch-home"))
    monkeypatch.setattr(torch.hub, "download_url_to_file", offline)
    code = main(["evaluate", "--data", str(tmp_path / "no-data"), "--weights", "imagenet",
                 "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code != 0 and len(err) == 1, err
    assert "--weights imagenet: cannot download" in err[0] and "--weights FILE" in err[0]
