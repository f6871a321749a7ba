"""The detectors that score with private internals of scikit-learn (DirectIForest,
VectorizedLOF, VectorizedOCSVM) and pyod (VectorizedINNE) run only on the versions pinned
in pyproject.toml's [server] extra: the pins hold an upper bound, the installed versions
satisfy them, and the internals the fast scorers read are there (their parity with pyod
is tested in test_iforest, test_inne, test_lof and test_ocsvm).
Widening a pin means running those tests on the new versions first."""

from __future__ import annotations

import importlib.metadata

import numpy as np
import pytest

from envad.server.detectors.iforest import DirectIForest
from envad.server.detectors.inne import VectorizedINNE
from envad.server.detectors.lof import VectorizedLOF
from envad.server.detectors.ocsvm import VectorizedOCSVM
from pyproject_extras import requirements

PINNED = ("scikit-learn", "pyod")


@pytest.mark.parametrize("name", PINNED)
def test_pin_has_an_upper_bound_and_holds_the_installed_version(name) -> None:
    requirement = requirements("server")[name]
    assert any(spec.operator in ("<", "<=", "==", "~=") for spec in requirement.specifier), \
        f"{requirement}: detectors use {name}'s private internals; pin a range"
    installed = importlib.metadata.version(name)
    assert requirement.specifier.contains(installed, prereleases=True), \
        f"{name} {installed} is outside the tested range {requirement}"


def test_the_private_internals_the_fast_scorers_read_exist() -> None:
    from sklearn.ensemble._iforest import _average_path_length

    X = np.random.default_rng(0).standard_normal((64, 4))
    forest = DirectIForest(random_state=0).fit(X).detector_
    for attribute in ("_max_features", "_max_samples", "_decision_path_lengths",
                      "_average_path_length_per_tree", "estimators_features_", "offset_"):
        assert hasattr(forest, attribute), f"IsolationForest lost {attribute}"
    assert callable(_average_path_length)
    inne = VectorizedINNE(n_estimators=5, random_state=0).fit(X)
    for attribute in ("_centroids", "_centroids_radius", "_ratio"):
        assert hasattr(inne, attribute), f"pyod INNE lost {attribute}"
    lof = VectorizedLOF(n_neighbors=5).fit(X).detector_
    for attribute in ("_fit_X", "_distances_fit_X_", "_lrd", "n_neighbors_", "novelty",
                      "metric", "p"):
        assert hasattr(lof, attribute), f"LocalOutlierFactor lost {attribute}"
    svm = VectorizedOCSVM().fit(X).detector_
    for attribute in ("support_vectors_", "dual_coef_", "intercept_", "_gamma", "kernel"):
        assert hasattr(svm, attribute), f"OneClassSVM lost {attribute}"
