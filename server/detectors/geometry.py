"""The embedding space detectors score in: a step fitted with the detectors of a bundle.

Camera style moves embeddings as a whole; content moves them within. A space step
removes what the fitting rows say is camera, before any detector sees the vectors:

- `raw`: the encoder's output as it is (the paper's setting);
- `l2`: unit length (Sun et al., ICML 2022: k-NN out-of-distribution detection works on
  normalised features);
- `pca_l2`: unit length, centred on the fitting rows' mean, rotated onto their principal
  axes (largest variance first), unit length again. Centring takes away what every
  normal row shares; the rotation keeps every distance (k-NN, KDE and LOF see the
  centred geometry as it is) and hands the detectors that work feature by feature
  (isolation forests' splits, and PCA and OCSVM after their per-feature
  standardisation) the directions along which normal rows vary instead of the
  encoder's arbitrary axes;
- `style_l2`: the `n_style` leading directions of the between-camera scatter of the
  fitting rows' per-camera means are projected out, then unit length;
- `center_l2`: each camera is centred on its own mean, then unit length. Cameras of the
  fit set use their fit-row mean; another camera uses its own running mean once it has
  sent `min_camera_rows` images (per-camera adaptation at score time), the fit rows'
  global mean before that. Each row says which (`adaptation`);
- `white_l2`: unit length, centred on the fitting rows' mean, whitened by their
  covariance (shrunk towards `shrinkage` x its largest eigenvalue), unit length again:
  k-NN distances then weigh every direction of the fitting rows' spread alike
  (Mahalanobis k-NN) instead of letting a few dominant directions decide;
- `center_white_l2`: centred per camera as `center_l2`, whitened by the pooled
  within-camera covariance, then unit length.

Every step is a pure function of the fitted state and, for the camera-aware steps, of
the running per-camera statistics the caller passes in (server/env_stats.py keeps them durable).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from envad.defaults import DEFAULT_MIN_CAMERA_ROWS
from envad.errors import InvalidInput

#: the registered space steps, in the order reports list them
SPACES = ("raw", "l2", "pca_l2", "style_l2", "center_l2", "white_l2",
          "center_white_l2")
#: space steps that read the query's camera
CAMERA_AWARE = frozenset({"center_l2", "center_white_l2"})
#: space steps that whiten
WHITENED = frozenset({"white_l2", "center_white_l2"})
#: space steps that bring rows to unit length before they are fitted or centred
UNIT_FIRST = frozenset({"pca_l2", "white_l2"})
#: space steps that keep a basis (orthonormal rows) in `basis_`
WITH_BASIS = frozenset({"pca_l2", "style_l2"})
#: whitening's ridge as a fraction of the largest eigenvalue, chosen on the training
#: cameras' selection folds (docs/RESULTS.md, fifth round)
DEFAULT_SHRINKAGE = 0.003

#: values of `adaptation` per scored row
ADAPTED_FIT = "fit"          # a camera of the fit set: its fit-row mean
ADAPTED_CAMERA = "camera"    # an unseen camera with enough images: its own running mean
ADAPTED_GLOBAL = "global"    # too few images from this camera yet: the fit rows' mean


@dataclass(frozen=True)
class CameraStats:
    """Running statistics of one camera's raw embeddings."""

    count: int
    mean: np.ndarray


def unit_length(X: np.ndarray) -> np.ndarray:
    """Rows scaled to unit L2 norm (a zero row stays zero)."""
    norms = np.linalg.norm(X, axis=1, keepdims=True)
    return X / np.where(norms > 0, norms, 1.0)


def camera_means(X: np.ndarray, envs: np.ndarray) -> dict[str, np.ndarray]:
    """Mean row of each camera."""
    return {str(e): X[envs == e].mean(axis=0) for e in np.unique(envs)}


def style_directions(X: np.ndarray, envs: np.ndarray, n: int) -> np.ndarray:
    """Orthonormal rows [k, d], k = min(n, cameras - 1): the leading eigenvectors of the
    between-camera scatter of the per-camera means (each camera weighs the same)."""
    means = np.stack(list(camera_means(X, envs).values()))
    centred = means - means.mean(axis=0)
    k = min(n, len(means) - 1)
    if k <= 0:
        return np.zeros((0, X.shape[1]))
    # right singular vectors of the centred means = eigenvectors of their scatter
    _, singular, vt = np.linalg.svd(centred, full_matrices=False)
    keep = singular[:k] > 1e-9 * max(singular[0], 1e-300)
    return vt[:k][keep]


def effective_shrinkage(shrinkage: float, n_rows: int, dim: int) -> float:
    """The ridge fraction used with `n_rows` fitting rows of `dim` features: `shrinkage`
    when rows are plentiful, growing as (2 dim / n_rows)^2 when they are few (a covariance
    from fewer rows than dimensions spans only part of the space, and whitening would
    blow the rest up), capped at 1. Fitted on the training cameras' selection folds with
    their fit rows subsampled to 100-1,000 (docs/RESULTS.md, fifth round)."""
    return min(1.0, shrinkage * (1.0 + (2.0 * dim / max(n_rows, 1)) ** 2))


def covariance_eigen(C: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Eigenvalues (ascending) and eigenvectors (columns) of the centred rows' covariance."""
    return np.linalg.eigh(C.T @ C / max(len(C), 1))


def whitening(C: np.ndarray, shrinkage: float) -> np.ndarray:
    """Symmetric [d, d] matrix W such that the centred rows `C` times W have identity
    covariance, each eigenvalue first raised by `shrinkage` x the largest (a ridge:
    directions the rows barely span are scaled by a bounded factor, not by 1 / ~0)."""
    eigenvalues, vectors = covariance_eigen(C)
    eigenvalues = np.maximum(eigenvalues, 0.0)
    ridge = shrinkage * eigenvalues.max() if eigenvalues.max() > 0 else 1.0
    return (vectors / np.sqrt(eigenvalues + ridge)) @ vectors.T


def principal_axes(C: np.ndarray) -> np.ndarray:
    """Orthonormal rows [d, d]: the eigenvectors of the centred rows' covariance, largest
    eigenvalue first (a rotation: every distance is kept)."""
    _, vectors = covariance_eigen(C)
    return vectors[:, ::-1].T


def project_out(X: np.ndarray, basis: np.ndarray) -> np.ndarray:
    """X minus its component in the span of the orthonormal rows of `basis`."""
    if len(basis) == 0:
        return X
    return X - (X @ basis.T) @ basis


@dataclass
class EmbeddingSpace:
    """A fitted space step (scikit-learn style: parameters in __init__, state ends in _)."""

    name: str = "raw"
    n_style: int = 0
    min_camera_rows: int = DEFAULT_MIN_CAMERA_ROWS
    shrinkage: float = DEFAULT_SHRINKAGE
    global_mean_: np.ndarray | None = field(default=None, repr=False)
    camera_means_: dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    basis_: np.ndarray | None = field(default=None, repr=False)
    whitener_: np.ndarray | None = field(default=None, repr=False)

    def __post_init__(self):
        if self.name not in SPACES:
            raise InvalidInput(f"unknown space {self.name!r}; known: {', '.join(SPACES)}")
        if self.name == "style_l2" and self.n_style < 1:
            raise InvalidInput("style_l2 needs n_style >= 1 (directions to remove)")
        if self.min_camera_rows < 1:
            raise InvalidInput("min_camera_rows must be at least 1")
        if not (0.0 < self.shrinkage <= 1.0):
            raise InvalidInput(f"whitening shrinkage must be in (0, 1], got {self.shrinkage}")

    @property
    def camera_aware(self) -> bool:
        return self.name in CAMERA_AWARE

    def describe(self) -> str:
        """Short name with its parameter, as reports and provenance show it."""
        if self.name == "style_l2":
            return f"style_l2(n_style={self.n_style})"
        if self.name == "center_l2":
            return f"center_l2(min_camera_rows={self.min_camera_rows})"
        if self.name == "white_l2":
            return f"white_l2(shrinkage={self.shrinkage:g})"
        if self.name == "center_white_l2":
            return (f"center_white_l2(shrinkage={self.shrinkage:g}, "
                    f"min_camera_rows={self.min_camera_rows})")
        return self.name

    def fit(self, X: np.ndarray, envs: Sequence[str] | np.ndarray | None = None
            ) -> EmbeddingSpace:
        X = np.asarray(X, dtype=np.float64)
        if self.name in UNIT_FIRST:
            X = unit_length(X)
        self.global_mean_ = X.mean(axis=0)
        if self.name == "white_l2":
            self.whitener_ = whitening(X - self.global_mean_, self.ridge_for(X))
        if self.name == "pca_l2":
            self.basis_ = principal_axes(X - self.global_mean_)
        if self.name in ("style_l2", "center_l2", "center_white_l2"):
            if envs is None:
                raise InvalidInput(f"space {self.name} needs each fitting row's camera (env)")
            envs = np.asarray(envs).astype(str)
            if self.name == "style_l2" and len(np.unique(envs)) < 2:
                raise InvalidInput("space style_l2 needs rows from at least 2 cameras")
            if self.name == "style_l2":
                self.basis_ = style_directions(X, envs, self.n_style)
            else:
                self.camera_means_ = camera_means(X, envs)
            if self.name == "center_white_l2":
                fit_centres, _ = self.centres(list(envs), None)   # each row's camera mean
                self.whitener_ = whitening(X - fit_centres, self.ridge_for(X))
        return self

    def ridge_for(self, X: np.ndarray) -> float:
        """The whitening ridge fraction for fitting rows X (fewer rows: more ridge)."""
        return effective_shrinkage(self.shrinkage, len(X), X.shape[1])

    def transform(self, X: np.ndarray, envs: Sequence[str] | np.ndarray | None = None,
                  running: Callable[[str], CameraStats | None] | None = None
                  ) -> tuple[np.ndarray, list[str]]:
        """The rows in this space, and per row how its camera was adapted ("" when the
        space ignores cameras). `running(env)` gives an unseen camera's running stats."""
        X = np.asarray(X, dtype=np.float64)
        if self.name == "raw":
            return X, [""] * len(X)
        if self.name == "l2":
            return unit_length(X), [""] * len(X)
        if self.name == "pca_l2":
            assert self.basis_ is not None and self.global_mean_ is not None, "fit() first"
            return (unit_length((unit_length(X) - self.global_mean_) @ self.basis_.T),
                    [""] * len(X))
        if self.name == "style_l2":
            assert self.basis_ is not None, "fit() first"
            return unit_length(project_out(X, self.basis_)), [""] * len(X)
        if self.name == "white_l2":
            assert self.whitener_ is not None and self.global_mean_ is not None, "fit() first"
            return (unit_length((unit_length(X) - self.global_mean_) @ self.whitener_),
                    [""] * len(X))
        envs = [""] * len(X) if envs is None else [str(e) for e in envs]
        centres, adaptation = self.centres(envs, running)
        if self.name == "center_white_l2":
            assert self.whitener_ is not None, "fit() first"
            return unit_length((X - centres) @ self.whitener_), adaptation
        return unit_length(X - centres), adaptation

    def centres(self, envs: Sequence[str], running: Callable[[str], CameraStats | None] | None
                ) -> tuple[np.ndarray, list[str]]:
        """Camera-aware spaces: the mean each row is centred on, and which mean it is."""
        assert self.global_mean_ is not None, "fit() first"
        centres = np.empty((len(envs), len(self.global_mean_)))
        adaptation = []
        for i, env in enumerate(envs):
            if env in self.camera_means_:
                centres[i], kind = self.camera_means_[env], ADAPTED_FIT
            else:
                stats = running(env) if (running is not None and env) else None
                if stats is not None and stats.count >= self.min_camera_rows:
                    centres[i], kind = stats.mean, ADAPTED_CAMERA
                else:
                    centres[i], kind = self.global_mean_, ADAPTED_GLOBAL
            adaptation.append(kind)
        return centres, adaptation

    # ------------------------------------------------------------ persistence
    def params(self) -> dict:
        return {"name": self.name, "n_style": self.n_style,
                "min_camera_rows": self.min_camera_rows, "shrinkage": self.shrinkage}

    def arrays(self) -> dict[str, np.ndarray]:
        """Fitted state as named arrays (np.savez), read back by `from_arrays`."""
        assert self.global_mean_ is not None, "fit() first"
        cams = sorted(self.camera_means_)
        d = len(self.global_mean_)
        return {"global_mean": self.global_mean_,
                "basis": self.basis_ if self.basis_ is not None else np.zeros((0, d)),
                "whitener": (self.whitener_ if self.whitener_ is not None
                             else np.zeros((0, d))),
                "camera_names": np.array(cams, dtype=np.str_),
                "camera_means": (np.stack([self.camera_means_[c] for c in cams]) if cams
                                 else np.zeros((0, d)))}

    @classmethod
    def from_arrays(cls, params: Mapping, arrays: Mapping[str, np.ndarray]
                    ) -> EmbeddingSpace:
        space = cls(**params)
        space.global_mean_ = np.asarray(arrays["global_mean"], dtype=np.float64)
        basis = np.asarray(arrays["basis"], dtype=np.float64)
        space.basis_ = basis if space.name in WITH_BASIS else None
        if space.name in WHITENED:   # bundles saved before whitening have no "whitener"
            space.whitener_ = np.asarray(arrays["whitener"], dtype=np.float64)
        space.camera_means_ = {str(c): np.asarray(m, dtype=np.float64) for c, m in
                               zip(arrays["camera_names"], arrays["camera_means"], strict=True)}
        return space


def parse_space(text: str, *, min_camera_rows: int = DEFAULT_MIN_CAMERA_ROWS
                ) -> EmbeddingSpace:
    """An unfitted space from its name: `raw`, `l2`, `pca_l2`, `center_l2`, `style_l2`
    (n_style 1), `style_l2:N`, `white_l2`, `center_white_l2` (shrinkage
    DEFAULT_SHRINKAGE) or either whitened space with `:SHRINKAGE`."""
    name, _, arg = text.strip().partition(":")
    if name in WHITENED:
        try:
            shrinkage = float(arg) if arg else DEFAULT_SHRINKAGE
        except ValueError:
            raise InvalidInput(f"{name}:S needs a number S in (0, 1], got {text!r}") from None
        return EmbeddingSpace(name, shrinkage=shrinkage, min_camera_rows=min_camera_rows)
    if name == "style_l2":
        try:
            n_style = int(arg) if arg else 1
        except ValueError:
            raise InvalidInput(f"style_l2:N needs an integer N, got {text!r}") from None
        return EmbeddingSpace(name, n_style=n_style, min_camera_rows=min_camera_rows)
    if arg:
        raise InvalidInput(f"space {name!r} takes no parameter, got {text!r}")
    return EmbeddingSpace(name, min_camera_rows=min_camera_rows)
