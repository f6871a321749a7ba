"""envad client: library and `envad` CLI for scoring, backfill and retraining jobs.

`from envad.client import EnvadClient` loads grpc only when the name is used, so that
`envad --help` stays fast.
"""

from __future__ import annotations

import importlib

__all__ = ["EnvadClient", "FitSettings", "RetryPolicy"]


#: name -> the module that defines it, imported when the name is first used (PEP 562):
#: `import envad.client` loads no grpc
_LAZY = {"EnvadClient": "envad.client.library", "FitSettings": "envad.client.fit_options",
         "RetryPolicy": "envad.client.retry"}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'envad.client' has no attribute {name!r}")
