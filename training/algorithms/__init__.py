"""Pretraining algorithms, one small class each, behind one registry.

`REGISTRY` maps a name to its class; `names()` lists them; `get(name)` returns one.
Importing this package registers every algorithm.
"""

from envad.training.algorithms.base import Algorithm, EnvBatch
from envad.training.algorithms.registry import REGISTRY, get, names, register

# Registration side effects, in this order: names() lists algorithms in registration order.
# isort: off
from envad.training.algorithms import (  # noqa: F401
    untrained, erm, irm, fish, lisa, groupdro, coral, mocov3, ea_mocov3)
# isort: on

__all__ = ["REGISTRY", "Algorithm", "EnvBatch", "get", "names", "register"]
