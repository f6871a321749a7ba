"""`--weights imagenet`: torchvision's ImageNet ResNet-18 weights, the way its users get
them (downloaded once through torch.hub into `$TORCH_HOME/hub/checkpoints`, then read
from there); any other value is a local state-dict file, passed on as it is."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import torch
from torchvision.models import ResNet18_Weights

IMAGENET = "imagenet"


def cached_imagenet_file() -> Path:
    """Where torch.hub keeps torchvision's ImageNet ResNet-18 state dict."""
    url = ResNet18_Weights.IMAGENET1K_V1.url
    return Path(torch.hub.get_dir()) / "checkpoints" / os.path.basename(url)


def resolve_weights(value: str | None) -> str | None:
    """The state-dict file `--weights` names: `imagenet` is torchvision's file, downloaded
    into the torch.hub cache when it is not there yet; ValueError in one line when that
    download fails (no internet access), saying what to do instead."""
    if value != IMAGENET:
        return value
    target = cached_imagenet_file()
    if target.is_file():
        return str(target)
    url = ResNet18_Weights.IMAGENET1K_V1.url
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        torch.hub.download_url_to_file(url, str(target), progress=True)
    except Exception as exc:  # urllib's URLError, a socket timeout, an HTTP error, ...
        reason = " ".join(str(getattr(exc, "reason", exc)).split()) or type(exc).__name__
        raise ValueError(
            f"--weights imagenet: cannot download {url} ({reason}); on a machine with "
            f"internet access run the same command once and copy {target.name} from its "
            f"$TORCH_HOME/hub/checkpoints into {target.parent}, or pass --weights FILE "
            "(a torchvision ResNet-18 state dict)") from None
    return str(target)


def weights_digest(path: str | os.PathLike) -> str:
    """The first 12 hex digits of a weights file's SHA-256: what names (and keys the
    cache of) the evaluation's frozen-features row, so other weights never reuse it."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()[:12]
