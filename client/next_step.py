"""What `envad info` tells the user to do next, from what the server actually holds."""

from __future__ import annotations

from envad.client.results import ServerInfo


def next_step(info: ServerInfo) -> str:
    """One sentence naming the command that moves this server forward."""
    if info.active_model is None:
        return info.hint or "install an encoder: copy an envad .onnx file into the models dir"
    if info.total_rows == 0:
        return ("store images of your cameras: `envad backfill FOLDER` (one sub-folder per "
                "camera)")
    if info.bundle is None:
        return ("fit the detectors: `envad fit` (on split train when stored, else on every "
                "stored row)")
    return ("ready: `envad score IMAGE...`, or `envad backfill FOLDER --scores-out "
            "scores.csv` for a whole folder")
