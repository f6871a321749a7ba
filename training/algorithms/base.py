"""What every algorithm shares: one constructor, `update(env_batches)`, `embed(x)`.

An algorithm is an nn.Module holding the encoder (the only part exported), its heads,
and its optimizer. Randomness inside an update (augmentations, mixup, env order) comes
from a generator seeded by (seed, step), so a resumed run replays exactly.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from torch import nn
from torch.nn import functional as F

from envad.training import aux_losses
from envad.training.algorithms.replicas import SINGLE_PROCESS, Replicas
from envad.training.augment import STYLE_AUGMENTS, style_augment
from envad.training.heads import check_head, make_head
from envad.training.mixstyle import MixStyle
from envad.training.models import Encoder, EncoderConfig

if TYPE_CHECKING:
    from envad.training.batches import TrainData

NUM_BUCKETS = 2   # the paper's supervised task: normal_a vs normal_b
SCHEDULES = ("constant", "cosine")
#: self-supervised auxiliary losses a supervised algorithm may add
AUX_LOSSES = ("none", "rotation", "contrastive")
#: rotation loss weight (Hendrycks et al., NeurIPS 2019, "Using self-supervised learning
#: can improve model robustness and uncertainty": lambda 0.5 for OOD detection)
ROTATION_WEIGHT = 0.5


@dataclass(frozen=True)
class EnvBatch:
    """A minibatch from one training environment.

    x: float [n,3,S,S] in [0,1]; y: long [n] target: the bucket (0 normal_a, 1 normal_b)
    for the paper's task, the normal class index for `--task class`;
    env: index of the environment; rows: long [n] positions in the TrainData.
    """

    x: torch.Tensor
    y: torch.Tensor
    env: int
    rows: torch.Tensor


@dataclass(frozen=True)
class OptimHparams:
    """Settings shared by all trained algorithms: Adam, its schedule, the head.

    lr 1e-3: DomainBed hparams_registry's value for small images, and the BENCHMARK.md
    calibration (ResNet-18, Adam 1e-3). weight_decay 0: DomainBed's default.
    schedule: "constant" (DomainBed) or "cosine" (linear warm-up over `warmup_fraction`
    of the steps, then a half cosine to 0, as moco-v3's `adjust_learning_rate`).
    head: the supervised algorithms' classifier head (training/heads.py: "linear", the
    paper's, or "cosine"); self-supervised algorithms have none and refuse another.
    """

    lr: float = 1e-3
    weight_decay: float = 0.0
    schedule: str = "constant"
    warmup_fraction: float = 0.0
    head: str = "linear"

    def __post_init__(self):
        check_head(self.head)
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {SCHEDULES}, got {self.schedule!r}")
        if not 0.0 <= self.warmup_fraction < 1.0:
            raise ValueError(f"warmup_fraction must be in [0, 1), got {self.warmup_fraction}")


def scheduled_lr(step: int, total_steps: int, base_lr: float, schedule: str = "constant",
                 warmup_fraction: float = 0.0) -> float:
    """Learning rate of step `step` (0-based) of `total_steps`."""
    if schedule == "constant":
        return base_lr
    warmup = int(warmup_fraction * total_steps)
    if step < warmup:
        return base_lr * (step + 1) / warmup
    progress = (step - warmup) / max(total_steps - warmup, 1)
    return base_lr * 0.5 * (1.0 + math.cos(math.pi * min(progress, 1.0)))


def rotated_views(x: torch.Tensor, generator: torch.Generator
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """Each image turned by a random multiple of 90 degrees, and that multiple (0..3)."""
    turns = torch.randint(0, 4, (len(x),), generator=generator)
    out = torch.empty_like(x)
    for k in range(4):
        rows = torch.nonzero(turns == k).flatten().to(x.device)
        if len(rows):
            out[rows] = torch.rot90(x[rows], k, dims=(2, 3))
    return out, turns.to(x.device)


def make_hparams(cls: type, values: Any) -> Any:
    """An hparams dataclass from None, an instance, or a dict (unknown keys are errors)."""
    if values is None:
        return cls()
    if isinstance(values, cls):
        return values
    if not isinstance(values, dict):
        raise TypeError(f"hparams must be {cls.__name__} or a dict, got {type(values)}")
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ValueError(f"unknown {cls.__name__} field(s) {unknown}; known: {sorted(known)}")
    return cls(**values)


class Algorithm(nn.Module):
    """Base class. Subclasses set `name`, `hparams_class`, and implement `_update`."""

    name: ClassVar[str] = ""
    hparams_class: ClassVar[type] = OptimHparams
    #: trains a classifier on the bucket task (has `predict`)
    supervised: ClassVar[bool] = True
    #: False for `random`: the run loop takes no steps
    trains: ClassVar[bool] = True
    #: updates taken so far (a buffer, so checkpoints carry it)
    step: torch.Tensor

    def __init__(self, encoder: EncoderConfig | dict, hparams: Any = None, *, num_envs: int,
                 total_steps: int, seed: int = 0, num_classes: int = NUM_BUCKETS,
                 augment: str = "none", aux: str = "none", load_weights: bool = True):
        super().__init__()
        if isinstance(encoder, dict):
            fields: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v
                                      for k, v in encoder.items()}
            encoder = EncoderConfig(**fields)
        if num_envs < 1:
            raise ValueError("need at least one training environment")
        if num_classes < 2:
            raise ValueError(f"need at least two target classes, got {num_classes}")
        if aux not in AUX_LOSSES:
            raise ValueError(f"aux must be one of {AUX_LOSSES}, got {aux!r}")
        if augment not in STYLE_AUGMENTS:
            raise ValueError(f"augment must be one of {sorted(STYLE_AUGMENTS)}, got {augment!r}")
        self.encoder_config = encoder
        self.hparams = make_hparams(self.hparams_class, hparams)
        if not self.supervised and getattr(self.hparams, "head", "linear") != "linear":
            raise ValueError(f"{self.name} learns without labels and has no classifier "
                             f"head; head {self.hparams.head!r} applies to supervised "
                             "algorithms only")
        self.num_envs = num_envs
        self.total_steps = max(int(total_steps), 1)
        self.seed = seed
        self.num_classes = num_classes
        self.augment = augment
        self.aux = aux
        self.encoder = Encoder(encoder, load_weights=load_weights)
        self.register_buffer("step", torch.zeros((), dtype=torch.long))
        self.optimizer: torch.optim.Adam | None = None
        #: the other workers of a data-parallel run (training/distributed.py)
        self.replicas: Replicas = SINGLE_PROCESS
        self._aux_batch: tuple[torch.Tensor, torch.Generator] | None = None
        self._aux_loss: float | None = None

    # ------------------------------------------------------------------ interface
    def prepare(self, data: TrainData, progress: bool = False) -> None:
        """Called once with the training data before the first update (default: nothing)."""

    def update(self, env_batches: list[EnvBatch]) -> dict[str, float]:
        """One training step on minibatches from several environments; returns losses."""
        self.train()
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + int(self.step))
        self._apply_schedule()
        if self.supervised and self.augment != "none":
            env_batches = [dataclasses.replace(b, x=style_augment(b.x, self.augment, generator))
                           for b in env_batches]
        self._aux_batch = (torch.cat([b.x for b in env_batches]), generator)
        self.encoder.mixing = self._mixing(generator)
        try:
            logs = self._update(env_batches, generator)
        finally:
            self.encoder.mixing = None
            self._aux_batch = None
        if self._aux_loss is not None:
            logs[self.aux] = self._aux_loss
            self._aux_loss = None
        self.step += 1
        return logs

    def _mixing(self, generator: torch.Generator) -> MixStyle | None:
        """This step's MixStyle, when the augmentation asks for it (supervised only)."""
        config = STYLE_AUGMENTS[self.augment]
        if not self.supervised or config is None or config.mixstyle_p <= 0:
            return None
        return MixStyle(generator, p=config.mixstyle_p)

    def current_lr(self) -> float:
        hp = self.hparams
        return scheduled_lr(int(self.step), self.total_steps, hp.lr, hp.schedule,
                            hp.warmup_fraction)

    def _apply_schedule(self) -> None:
        if self.optimizer is None or self.hparams.schedule == "constant":
            return
        lr = self.current_lr()
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    def _update(self, env_batches: list[EnvBatch], generator: torch.Generator
                ) -> dict[str, float]:
        raise NotImplementedError

    def embed(self, x: torch.Tensor) -> torch.Tensor:
        """The 512-d embedding (the exported output) of float images in [0, 1]."""
        return self.encoder(x)

    # ------------------------------------------------------------------ checkpoints
    def constructor_args(self) -> dict:
        """Plain-data arguments that rebuild this algorithm (see checkpoint.py)."""
        return {"encoder": dataclasses.asdict(self.encoder_config),
                "hparams": dataclasses.asdict(self.hparams), "num_envs": self.num_envs,
                "total_steps": self.total_steps, "seed": self.seed,
                "num_classes": self.num_classes, "augment": self.augment, "aux": self.aux}

    def training_state(self) -> dict:
        state = {"model": self.state_dict()}
        if self.optimizer is not None:
            state["optimizer"] = self.optimizer.state_dict()
        return state

    def load_training_state(self, state: dict) -> None:
        self.load_state_dict(state["model"])
        if self.optimizer is not None and "optimizer" in state:
            self.optimizer.load_state_dict(state["optimizer"])
            self._optimizer_state_like_params()

    def place(self, device: str) -> None:
        """Move to `device` with every convolution weight in channels-last layout, where
        ResNet-18 trains faster (oneDNN runs the convolutions, and the feature maps that
        follow them, channels-last; about 1.1x a step at 32 px on a 2-core CPU,
        benchmarks/train_speed.py). The same computation up to float rounding."""
        self.to(device)
        self.to(memory_format=torch.channels_last)
        self._optimizer_state_like_params()

    def _optimizer_state_like_params(self) -> None:
        """Give each optimizer moment its parameter's memory layout. The fused Adam kernel
        walks parameter, gradient and moments as flat arrays: a moment in another layout
        (a checkpoint's, or one made before `place`) would be updated against the wrong
        elements, silently."""
        if self.optimizer is None:
            return
        for param, state in self.optimizer.state.items():
            for key, value in state.items():
                if (torch.is_tensor(value) and value.shape == param.shape
                        and value.stride() != param.stride()):
                    state[key] = torch.empty_strided(
                        param.shape, param.stride(), dtype=value.dtype,
                        device=value.device).copy_(value)

    def _adam(self, params) -> torch.optim.Adam:
        # torch's fused Adam kernel runs on CPU and CUDA (torch >= 2.4) and is ~3x faster
        # than the per-tensor loop; the parameters may move between devices afterwards
        # (`place`), the kernel follows them
        return torch.optim.Adam(params, lr=self.current_lr(),
                                weight_decay=self.hparams.weight_decay, fused=True)

    def _optimizer_step(self, loss: torch.Tensor) -> None:
        """Backward, the gradients averaged over the workers (`replicas`), one step of
        the optimizer."""
        assert self.optimizer is not None
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.replicas.average_gradients(
            p for group in self.optimizer.param_groups for p in group["params"])
        self.optimizer.step()


class SupervisedAlgorithm(Algorithm):
    """Encoder + linear classifier on the training targets (the two normal buckets, or
    every normal class), trained with Adam."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.classifier = make_head(self.hparams.head, self.encoder.dim, self.num_classes)
        if self.aux == "rotation":
            self.rotation_head = nn.Linear(self.encoder.dim, 4)
        elif self.aux == "contrastive":
            self.contrastive_head = aux_losses.projection_head(self.encoder.dim)
        self.optimizer = self._adam(self.parameters())

    def predict(self, x: torch.Tensor) -> torch.Tensor:
        """Target logits [N, num_classes]."""
        return self.predict_embedded(self.encoder(x))

    def predict_embedded(self, z: torch.Tensor) -> torch.Tensor:
        """Target logits of embeddings `z` (what `embed` returns): validation scores the
        classifier on the embeddings it has computed already."""
        return self.classifier(z)

    def _step(self, loss: torch.Tensor) -> None:
        """Optimizer step on `loss` (plus the auxiliary loss on this update's batch)."""
        if self.aux == "rotation" and self._aux_batch is not None:
            x, generator = self._aux_batch
            turned, turns = rotated_views(x, generator)
            rotation = F.cross_entropy(self.rotation_head(self.encoder(turned)), turns)
            loss = loss + ROTATION_WEIGHT * rotation
            self._aux_loss = rotation.item()
        elif self.aux == "contrastive" and self._aux_batch is not None:
            term = aux_losses.contrastive_term(self.encoder, self.contrastive_head,
                                               *self._aux_batch)
            loss = loss + aux_losses.CONTRASTIVE_WEIGHT * term
            self._aux_loss = term.item()
        assert self.optimizer is not None, "the subclass builds its optimizer in __init__"
        self._optimizer_step(loss)


def concat(env_batches: list[EnvBatch]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """All minibatches as one batch: x, y, and the env index of each sample."""
    x = torch.cat([b.x for b in env_batches])
    y = torch.cat([b.y for b in env_batches])
    envs = torch.cat([torch.full((len(b.y),), b.env, dtype=torch.long, device=b.y.device)
                      for b in env_batches])
    return x, y, envs


def per_env_losses(logits: torch.Tensor, env_batches: list[EnvBatch]) -> list[torch.Tensor]:
    """Cross-entropy of each env's slice of `logits` (rows ordered as `concat`)."""
    sizes = [len(b.y) for b in env_batches]
    return [F.cross_entropy(chunk, b.y)
            for chunk, b in zip(torch.split(logits, sizes), env_batches, strict=True)]
