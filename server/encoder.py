"""ONNX Runtime encoders and the registry of model files in the models directory.

An encoder file follows docs/model-format.md: input `images` uint8 [N,H,W,3], output
`embedding` float32 [N,D], metadata in metadata_props. The `accelerator` setting picks
the provider: `auto` (default) uses CUDA when onnxruntime-gpu provides it and the CPU
otherwise, `cpu` always the CPU, `cuda` CUDA, falling back to the CPU with a logged
one-line reason when this onnxruntime has no CUDA provider. ONNX Runtime's CPU build
(`onnxruntime`) and CUDA build (`onnxruntime-gpu`) install the same module: where both
are installed the one installed last wins, typically the CPU build, and the reason then
says how to keep only the CUDA build (also under `auto`, since installing onnxruntime-gpu
asked for CUDA).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import logging
import threading
from pathlib import Path

import numpy as np
import onnxruntime as ort

from envad.errors import InvalidInput, NotFound
from envad.records import ModelInfo
from envad.server.limits import shorten

log = logging.getLogger(__name__)

INPUT_NAME = "images"
OUTPUT_NAME = "embedding"
REQUIRED_KEYS = ("envad.format_version", "envad.model_id", "envad.input_size",
                 "envad.embedding_dim", "envad.algorithm", "envad.training_envs",
                 "envad.dataset", "envad.created")


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


#: the `accelerator` setting's values
ACCELERATORS = ("auto", "cpu", "cuda")
CUDA = "CUDAExecutionProvider"
CPU = "CPUExecutionProvider"


#: ONNX Runtime's builds on PyPI: each installs the module `onnxruntime`
CPU_BUILD, CUDA_BUILD = "onnxruntime", "onnxruntime-gpu"


def installed_onnxruntime_builds() -> set[str]:
    """Which of ONNX Runtime's CPU and CUDA builds are installed (their distributions)."""
    found = set()
    for name in (CPU_BUILD, CUDA_BUILD):
        try:
            importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        found.add(name)
    return found


def choose_providers(accelerator: str = "auto", available: list[str] | None = None,
                     builds: set[str] | None = None) -> tuple[list[str], str]:
    """ONNX Runtime providers for the `accelerator` setting, and a one-line note when
    the choice differs from what was asked (`cuda` without onnxruntime-gpu's CUDA, or
    onnxruntime-gpu installed but shadowed by the CPU build)."""
    if accelerator not in ACCELERATORS:
        raise InvalidInput(f"accelerator must be one of {', '.join(ACCELERATORS)}, "
                           f"got {accelerator!r}")
    available = ort.get_available_providers() if available is None else available
    if accelerator == "cpu":
        return [CPU], ""
    if CUDA in available:
        return [CUDA, CPU], ""
    builds = installed_onnxruntime_builds() if builds is None else builds
    if builds >= {CPU_BUILD, CUDA_BUILD}:
        return [CPU], (f"{CUDA_BUILD} is installed beside {CPU_BUILD}, whose files took its "
                       f"place, so there is no CUDA provider (keep one build: pip uninstall "
                       f"-y {CPU_BUILD} {CUDA_BUILD} && pip install {CUDA_BUILD}): encoding "
                       f"on the CPU")
    if accelerator == "cuda":
        return [CPU], ("accelerator 'cuda' asked for, but this onnxruntime has no CUDA "
                       "provider (install envad[gpu] on a CUDA machine): encoding on the CPU")
    return [CPU], ""


def parse_metadata(props: dict[str, str], path: Path, sha256: str) -> ModelInfo:
    """Validate metadata_props against the model format; InvalidInput names what is wrong."""
    missing = [k for k in REQUIRED_KEYS if k not in props]
    if missing:
        raise InvalidInput(f"{path.name}: missing metadata_props {missing} "
                           "(see docs/model-format.md)")
    try:
        envs = json.loads(props["envad.training_envs"])
        return ModelInfo(
            model_id=props["envad.model_id"], file=path.name, sha256=sha256,
            input_size=int(props["envad.input_size"]),
            embedding_dim=int(props["envad.embedding_dim"]),
            algorithm=props["envad.algorithm"], training_envs=tuple(str(e) for e in envs),
            dataset=props["envad.dataset"], created=props["envad.created"],
            metadata=dict(props),
        )
    except (ValueError, TypeError) as exc:
        raise InvalidInput(f"{path.name}: malformed metadata_props: {exc}") from exc


class OnnxEncoder:
    """One loaded encoder: `embed(uint8 NHWC) -> float32 [N, D]`."""

    def __init__(self, path: Path, *, intra_op_threads: int = 0, accelerator: str = "auto",
                 spinning: bool = False):
        self.path = Path(path)
        providers, note = choose_providers(accelerator)
        if note:
            log.warning("%s: %s", self.path.name, note)
        options = ort.SessionOptions()
        options.intra_op_num_threads = intra_op_threads
        options.inter_op_num_threads = 1          # one graph at a time: the batcher's
        # idle intra-op threads yield the cores to decoding and the detectors at once
        # (server/threads.py), unless asked to spin
        options.add_session_config_entry("session.intra_op.allow_spinning",
                                         "1" if spinning else "0")
        options.log_severity_level = 3
        try:
            self._session = ort.InferenceSession(str(self.path), options,
                                                 providers=providers)
        except Exception as exc:  # onnxruntime raises its own exception types
            raise InvalidInput(f"{self.path.name}: not a loadable ONNX model: {exc}") from exc
        props = self._session.get_modelmeta().custom_metadata_map
        self.meta = parse_metadata(props, self.path, file_sha256(self.path))
        inputs = {i.name: i for i in self._session.get_inputs()}
        outputs = {o.name for o in self._session.get_outputs()}
        if INPUT_NAME not in inputs or OUTPUT_NAME not in outputs:
            raise InvalidInput(f"{self.path.name}: graph must have input '{INPUT_NAME}' and "
                               f"output '{OUTPUT_NAME}'")
        if inputs[INPUT_NAME].type != "tensor(uint8)":
            raise InvalidInput(f"{self.path.name}: input must be uint8, "
                               f"is {inputs[INPUT_NAME].type}")
        self.providers = self._session.get_providers()

    @property
    def input_size(self) -> int:
        return self.meta.input_size

    @property
    def dim(self) -> int:
        return self.meta.embedding_dim

    def embed(self, images: np.ndarray) -> np.ndarray:
        """Embed a uint8 batch [N, S, S, 3] (S = input size)."""
        size = self.input_size
        if images.dtype != np.uint8 or images.ndim != 4 or images.shape[1:] != (size, size, 3):
            raise InvalidInput(f"encoder {self.meta.model_id} takes uint8 [N,{size},{size},3], "
                               f"got {images.dtype} {list(images.shape)}")
        if len(images) == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        (out,) = self._session.run([OUTPUT_NAME], {INPUT_NAME: images})
        return np.asarray(out, dtype=np.float32)


class ModelRegistry:
    """The catalogue of encoders found in a models directory: scan it, get one by id.

    Which encoder is active is not the registry's business: the Engine alone owns that,
    because activating also needs the encoder's store table and index to open.
    """

    def __init__(self, models_dir: Path, *, intra_op_threads: int = 0,
                 accelerator: str = "auto", spinning: bool = False):
        self.models_dir = Path(models_dir)
        self._threads = intra_op_threads
        self._accelerator = accelerator
        self._spinning = spinning
        self._lock = threading.RLock()
        self._loaded: dict[str, OnnxEncoder] = {}   # by sha256
        self._hashes: dict[Path, tuple[int, int, str]] = {}  # path -> (mtime, size, sha256)
        self._by_id: dict[str, OnnxEncoder] = {}
        self.problems: dict[str, str] = {}          # file name -> why it was skipped
    def scan(self) -> list[ModelInfo]:
        """Load metadata of every *.onnx file (cached by content hash)."""
        with self._lock:
            by_id: dict[str, OnnxEncoder] = {}
            problems: dict[str, str] = {}
            paths = sorted(self.models_dir.glob("*.onnx")) if self.models_dir.is_dir() else []
            for path in paths:
                try:
                    sha = self._hash(path)
                    encoder = self._loaded.get(sha)
                    if encoder is None:
                        encoder = OnnxEncoder(path, intra_op_threads=self._threads,
                                              accelerator=self._accelerator,
                                              spinning=self._spinning)
                        self._loaded[sha] = encoder
                except InvalidInput as exc:
                    problems[path.name] = str(exc)
                    continue
                model_id = encoder.meta.model_id
                if model_id in by_id:
                    problems[path.name] = (f"duplicate model id {model_id!r} (also in "
                                           f"{by_id[model_id].path.name}); ignored")
                    continue
                by_id[model_id] = encoder
            for name, why in problems.items():
                if self.problems.get(name) != why:
                    log.warning("model file %s skipped: %s", name, why)
            self._by_id, self.problems = by_id, problems
            return [e.meta for e in by_id.values()]

    def _hash(self, path: Path) -> str:
        """sha256 of a model file, recomputed only when its mtime or size changed."""
        stat = path.stat()
        cached = self._hashes.get(path)
        if cached and cached[:2] == (stat.st_mtime_ns, stat.st_size):
            return cached[2]
        sha = file_sha256(path)
        self._hashes[path] = (stat.st_mtime_ns, stat.st_size, sha)
        return sha

    def get(self, model_id: str) -> OnnxEncoder:
        with self._lock:
            if model_id not in self._by_id:
                self.scan()
            if model_id not in self._by_id:
                known = ", ".join(sorted(self._by_id)) or "none"
                raise NotFound(f"unknown model {shorten(model_id)}; known models: "
                               f"{shorten(known, 400)}")
            return self._by_id[model_id]
