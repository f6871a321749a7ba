"""envad client: library and `envad` CLI for scoring, backfill and retraining jobs.

`from envad.client import EnvadClient` loads grpc only when the name is used, so that
`envad --help` stays fast.
"""

from __future__ import annotations

__all__ = ["EnvadClient", "FitSettings", "RetryPolicy"]


def __getattr__(name: str):
    if name == "EnvadClient":
        from envad.client.library import EnvadClient

        return EnvadClient
    if name == "FitSettings":
        from envad.client.fit_options import FitSettings

        return FitSettings
    if name == "RetryPolicy":
        from envad.client.retry import RetryPolicy

        return RetryPolicy
    raise AttributeError(f"module 'envad.client' has no attribute {name!r}")
