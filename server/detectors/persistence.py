"""Bundles on disk: `<bundles_dir>/<bundle_id>/` = manifest.json + one file per detector.

The manifest records every file's sha256; loading verifies them before unpickling and
only ever reads below the server's own bundles directory (nothing pickled crosses the
wire). A bundle is written to a temporary directory and renamed into place, so a crash
never leaves half a bundle. The active bundle of each encoder is a small pointer file
`<bundles_dir>/active/<model>.json`, also replaced atomically.

A loaded bundle's arrays are mapped from its files (read-only), not copied: pages are
read when a score first touches them, so what a server holds is what it scores with. A
detector's cross-fit folds (leave_out.py), four fits beside the whole one, are scored
only for fit rows, and a server that scores new images never reads them: at the default
sample cap they are about 200 MB of the paper's eight detectors. A bundle's files are
never changed once written (a new Fit writes a new bundle). IsoForest is read, not
mapped (`DetectorSpec.mapped`): scikit-learn copies its trees on loading.

On a data dir on object storage (`BundleStore(..., remote=...)`), the objects under
`<uri>/bundles` are the bundles and the pointers, and the local folder is a cache: a
bundle is uploaded once written (its manifest last, so a manifest seen names files that
exist), a pointer after it, and a bundle or pointer missing locally is downloaded.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from pathlib import Path

import joblib
import numpy as np

from envad.errors import FailedPrecondition, Internal, InvalidInput, NotFound
from envad.server.detectors import registry
from envad.server.detectors.bundle import DetectorBundle
from envad.server.detectors.calibration import KINDS as CALIBRATION_KINDS
from envad.server.detectors.geometry import EmbeddingSpace
from envad.server.detectors.leave_out import FitGroups
from envad.server.detectors.reviewed import ReviewMemory
from envad.server.detectors.score_adaptation import parse_score_adaptation
from envad.server.detectors.unseen_camera import UnseenCameraPrior
from envad.server.durable import fsync_path
from envad.server.remote_dir import RemoteDir

MANIFEST = "manifest.json"
SPACE_FILE = "space.npz"
FIT_GROUPS_FILE = "fit_groups.npz"
REVIEWED_FILE = "reviewed.npz"
FORMAT_VERSION = 1
#: manifest keys every bundle of this format has (one written by a development version
#: before envad 0.1.0 may lack some: it is refused, and a Fit replaces it)
REQUIRED_KEYS = ("format_version", "space", "space_scores", "score_adaptation", "calibration")
_SAFE_ID = re.compile(r"^[A-Za-z0-9._-]+$")


def file_name_for(model_id: str) -> str:
    """A model id as a file name: characters other than letters, digits, '.', '_' and '-'
    become '_' (pointer and camera-statistics files are named after their encoder)."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", model_id)


def _sha256(path: Path) -> str:
    with path.open("rb") as file:
        return hashlib.file_digest(file, "sha256").hexdigest()


def _write_json_atomic(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, suffix=".tmp") as f:
        json.dump(data, f, indent=2)
        f.flush()
        os.fsync(f.fileno())
    os.replace(f.name, path)
    fsync_path(path.parent)


def save_bundle(bundle: DetectorBundle, bundles_dir: Path) -> Path:
    """Write the bundle atomically; returns its directory."""
    bundles_dir = Path(bundles_dir)
    bundles_dir.mkdir(parents=True, exist_ok=True)
    final = bundles_dir / bundle.bundle_id
    if final.exists():
        return final
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=bundles_dir))
    try:
        files: dict[str, str] = {}
        for name in bundle.detectors:
            joblib.dump(bundle.fitted[name], staging / f"{name}.joblib")
            np.save(staging / f"{name}.reference.npy", bundle.reference[name])
            files[f"{name}.joblib"] = ""
            files[f"{name}.reference.npy"] = ""
        if bundle.kept_features is not None:
            np.save(staging / "kept_features.npy", bundle.kept_features)
            files["kept_features.npy"] = ""
        np.savez(staging / SPACE_FILE, allow_pickle=False, **bundle.space.arrays())
        files[SPACE_FILE] = ""
        if bundle.fit_groups is not None:
            np.savez(staging / FIT_GROUPS_FILE, allow_pickle=False,
                     **bundle.fit_groups.arrays())
            files[FIT_GROUPS_FILE] = ""
        if bundle.reviewed is not None:
            np.savez(staging / REVIEWED_FILE, allow_pickle=False, **bundle.reviewed.arrays())
            files[REVIEWED_FILE] = ""
        for file_name in files:
            files[file_name] = _sha256(staging / file_name)
        manifest = {
            "format_version": FORMAT_VERSION, "bundle_id": bundle.bundle_id,
            "model_id": bundle.model_id, "detectors": bundle.detectors,
            "threshold": bundle.threshold, "contamination": bundle.contamination,
            "n_samples": bundle.n_samples, "n_features": bundle.n_features,
            "stats": bundle.stats, "created": bundle.created, "fit_filter": bundle.fit_filter,
            "seed": bundle.seed, "space": bundle.space.params(),
            "space_scores": bundle.space_scores,
            "score_adaptation": bundle.score_adaptation.spec(),
            "calibration": bundle.calibration, "files": files,
        }
        if bundle.unseen_camera is not None:
            manifest["unseen_camera"] = bundle.unseen_camera.to_json()
        (staging / MANIFEST).write_text(json.dumps(manifest, indent=2))
        for path in staging.iterdir():
            with open(path, "rb") as handle:
                os.fsync(handle.fileno())
        os.rename(staging, final)
        fsync_path(bundles_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return final


def load_bundle(path: Path, bundles_dir: Path) -> DetectorBundle:
    """Load a bundle directory that lies inside `bundles_dir`, verifying every file hash."""
    root = Path(bundles_dir).resolve()
    path = Path(path).resolve()
    if root not in path.parents:
        raise InvalidInput(f"refusing to load a bundle outside {root}: {path}")
    manifest_path = path / MANIFEST
    if not manifest_path.is_file():
        raise NotFound(f"no bundle at {path}")
    manifest = json.loads(manifest_path.read_text())
    for file_name, expected in manifest["files"].items():
        target = (path / file_name).resolve()
        if target.parent != path or not target.is_file():
            raise Internal(f"bundle {path.name}: missing or misplaced file {file_name}")
        if _sha256(target) != expected:
            raise Internal(f"bundle {path.name}: {file_name} does not match its manifest hash; "
                           "refusing to load it")
    _check_format(path.name, manifest)
    names = manifest["detectors"]
    calibration = manifest["calibration"]
    if calibration not in CALIBRATION_KINDS:
        raise Internal(f"bundle {path.name}: unknown calibration {calibration!r}; known: "
                       f"{sorted(CALIBRATION_KINDS)}")
    kept = path / "kept_features.npy"
    with np.load(path / SPACE_FILE, allow_pickle=False) as arrays:
        space = EmbeddingSpace.from_arrays(manifest["space"], arrays)
    fit_groups = None                   # bundles fitted without ids: no leave-out
    if FIT_GROUPS_FILE in manifest["files"]:
        with np.load(path / FIT_GROUPS_FILE, allow_pickle=False) as arrays:
            fit_groups = FitGroups.from_arrays(arrays)
    reviewed = None                     # no reviewed row among the fit rows
    if REVIEWED_FILE in manifest["files"]:
        with np.load(path / REVIEWED_FILE, allow_pickle=False) as arrays:
            reviewed = ReviewMemory.from_arrays(arrays)
    return DetectorBundle(
        bundle_id=manifest["bundle_id"], model_id=manifest["model_id"], detectors=names,
        fitted={n: joblib.load(path / f"{n}.joblib", mmap_mode="r" if _mapped(n) else None)
                for n in names},
        reference={n: np.load(path / f"{n}.reference.npy") for n in names},
        threshold=manifest["threshold"], contamination=manifest["contamination"],
        n_samples=manifest["n_samples"], n_features=manifest["n_features"],
        kept_features=np.load(kept) if kept.exists() else None, stats=manifest["stats"],
        created=manifest["created"], fit_filter=manifest["fit_filter"], seed=manifest["seed"],
        space=space, space_scores=manifest["space_scores"],
        score_adaptation=parse_score_adaptation(manifest["score_adaptation"]),
        calibration=calibration, fit_groups=fit_groups, reviewed=reviewed,
        unseen_camera=UnseenCameraPrior.from_json(manifest.get("unseen_camera")),
    )


def _mapped(detector: str) -> bool:
    """Whether a detector's arrays are mapped from its file (registry.DetectorSpec)."""
    return detector not in registry.names() or registry.get(detector).mapped


def _check_format(name: str, manifest: dict) -> None:
    """Refuse a bundle of another format, naming what to do (fit a new one)."""
    missing = [key for key in REQUIRED_KEYS if key not in manifest]
    if missing:
        raise FailedPrecondition(
            f"bundle {name} has an unknown older format (its manifest has no "
            f"{', '.join(missing)}): refit the detectors with `envad fit` (or the Fit RPC)")
    if manifest["format_version"] != FORMAT_VERSION:
        raise FailedPrecondition(
            f"bundle {name} has format version {manifest['format_version']!r}, this server "
            f"reads {FORMAT_VERSION}: refit the detectors with `envad fit` (or the Fit RPC)")


class BundleStore:
    """The bundles of a server's data dir, and which one is active per encoder; with
    `remote`, the bundles on object storage, cached in `bundles_dir`."""

    def __init__(self, bundles_dir: Path, remote: RemoteDir | None = None):
        self.root = Path(bundles_dir)
        self.remote = remote

    def _pointer(self, model_id: str) -> Path:
        return self.root / "active" / (file_name_for(model_id) + ".json")

    def save(self, bundle: DetectorBundle) -> Path:
        path = save_bundle(bundle, self.root)
        if self.remote is not None:
            self.remote.push_tree(path, bundle.bundle_id, last=[MANIFEST])
        return path

    def _cached(self, bundle_id: str) -> Path:
        """The bundle's local folder, downloaded first when it is only on the remote."""
        path = self.root / bundle_id
        if self.remote is not None and not (path / MANIFEST).is_file():
            self.remote.pull_tree(bundle_id, path)
        return path

    def load(self, bundle_id: str) -> DetectorBundle:
        if not _SAFE_ID.match(bundle_id or ""):
            raise InvalidInput(f"malformed bundle id {bundle_id!r}")
        return load_bundle(self._cached(bundle_id), self.root)

    def list(self) -> list[dict]:
        """Manifests of every stored bundle, oldest first."""
        if self.remote is not None:
            texts = [self.remote.read_bytes(name) for name in self.remote.files()
                     if name.count("/") == 1 and name.endswith("/" + MANIFEST)]
            manifests = [json.loads(text) for text in texts if text is not None]
            return sorted(manifests, key=lambda m: m["created"])
        if not self.root.is_dir():
            return []
        manifests = [json.loads((d / MANIFEST).read_text()) for d in sorted(self.root.iterdir())
                     if d.is_dir() and (d / MANIFEST).is_file()]
        return sorted(manifests, key=lambda m: m["created"])

    def activate(self, bundle_id: str) -> None:
        bundle_dir = self._cached(bundle_id) if _SAFE_ID.match(bundle_id or "") else None
        if bundle_dir is None or not (bundle_dir / MANIFEST).is_file():
            raise NotFound(f"no bundle {bundle_id!r} in {self.root}")
        model_id = json.loads((bundle_dir / MANIFEST).read_text())["model_id"]
        pointer = self._pointer(model_id)
        _write_json_atomic(pointer, {"bundle_id": bundle_id})
        if self.remote is not None:
            self.remote.push_file(pointer, f"active/{pointer.name}")

    def active_id(self, model_id: str) -> str | None:
        """The id of the encoder's active bundle (None: none), without loading it."""
        pointer = self._pointer(model_id)
        if self.remote is not None:     # the remote pointer decides, the cache follows
            if not self.remote.pull_file(f"active/{pointer.name}", pointer):
                return None
        if not pointer.is_file():
            return None
        return json.loads(pointer.read_text())["bundle_id"]

    def active(self, model_id: str) -> DetectorBundle | None:
        bundle_id = self.active_id(model_id)
        return self.load(bundle_id) if bundle_id is not None else None
