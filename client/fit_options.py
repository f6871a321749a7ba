"""The Fit options of `envad fit`, `envad scan` and `envad retrain`, declared once.

`FitSettings` is the record `EnvadClient.fit` takes; `add_fit_options` adds the flags
(each command names the ones it offers) and `fit_keywords` turns the parsed flags back
into FitSettings' fields (also the field names of ScanOptions and RetrainSpec). Help text
renders every default from its owner: envad.defaults and envad.records for what the
server applies when a request leaves an option at 0 or "", envad.pipeline for the
default pipeline's choices. Nothing here imports the server.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass

from envad.defaults import (
    DEFAULT_CONTAMINATION,
    DEFAULT_EVENT_GAP_S,
    DEFAULT_MIN_CAMERA_ROWS,
    FIT_MAX_SAMPLES,
)
from envad.pipeline import DEFAULT_PIPELINE
from envad.records import MIN_FIT_ROWS

__all__ = ["FIT_OPTIONS", "FIT_OPTION_HELP", "FitSettings", "add_fit_options",
           "fit_keywords", "fit_settings", "parse_detectors"]

_PIPELINE = "the default pipeline's"


@dataclass(frozen=True)
class FitSettings:
    """How the server fits a bundle (FitRequest's options). A 0, "" or empty value
    leaves the option to the server's default (envad.defaults, the default pipeline);
    the help text below says what each one means."""

    detectors: tuple[str, ...] = ()
    max_samples: int = 0
    contamination: float = 0.0
    stylist: bool = False
    drop_fraction: float = 0.0
    seed: int = 0
    activate: bool = True
    space: str = ""
    min_camera_rows: int = 0
    allow_few_rows: bool = False
    score_adaptation: str = ""
    event_gap_s: float = 0.0


def _seconds(value: float) -> str:
    return f"{value:g} s"


#: help text of each Fit option, by argparse dest (the same words in every command)
FIT_OPTION_HELP: dict[str, str] = {
    "detectors": "comma-separated detector names (default: "
                 f"{_PIPELINE}, {','.join(DEFAULT_PIPELINE.detectors) or 'all eight'}; "
                 "docs/detectors.md lists the paper's eight)",
    "space": "space step before the detectors: raw, l2, pca_l2, style_l2:N, center_l2, "
             "white_l2[:S], center_white_l2[:S] or auto (default: "
             f"{_PIPELINE}, {DEFAULT_PIPELINE.space}; see docs/detectors.md)",
    "score_adaptation": "put each camera's scores on the fit set's scale: camera[:P], "
                        "median[:P], gated[:P[:Z]], frozen[:P[:N]] or low[:P[:N]] (P rows "
                        "of the fit set's statistics as a prior; Z the gate, N the rows "
                        "kept; camera, frozen and low take +unseen: a new camera's prior; "
                        "any takes +shift, last: the location only), or none (default: "
                        f"{_PIPELINE}, {DEFAULT_PIPELINE.score_adaptation}; see "
                        "docs/detectors.md)",
    "contamination": "expected anomaly rate of the fit rows; sets the threshold (default: "
                     f"{DEFAULT_CONTAMINATION:g})",
    "allow_few_rows": f"fit even on fewer than {MIN_FIT_ROWS} rows (with a warning; the "
                      "server's Fit refuses them otherwise)",
    "event_gap": "fit rows of a camera at most SECONDS apart are one event (a burst); "
                 "scoring a fit row, every detector leaves its whole event out (default 0: the "
                 f"server's, {_seconds(DEFAULT_EVENT_GAP_S)}; negative: only the row itself)",
    "max_samples": "cap on fit rows, seeded sample (default 0: the server's fit_max_samples, "
                   f"{FIT_MAX_SAMPLES})",
    "stylist": "drop the most environment-dependent features before fitting",
    "drop_fraction": "fraction of features Stylist drops (default: Stylist's own)",
    "min_camera_rows": "center_l2, center_white_l2: images an unseen camera sends before it "
                       "is re-centred on its own mean (default 0: the server's, "
                       f"{DEFAULT_MIN_CAMERA_ROWS})",
    "seed": "seed of the fit's row sample",
    "no_activate": "keep the current bundle active",
}

#: every Fit option, in the order the help lists them
FIT_OPTIONS: tuple[str, ...] = tuple(FIT_OPTION_HELP)

_FLAG_KWARGS: dict[str, dict] = {
    "detectors": {"default": ""},
    "space": {"default": ""},
    "score_adaptation": {"default": ""},
    "contamination": {"type": float, "default": 0.0},
    "allow_few_rows": {"action": "store_true"},
    "event_gap": {"type": float, "default": 0.0, "metavar": "SECONDS"},
    "max_samples": {"type": int, "default": 0},
    "stylist": {"action": "store_true"},
    "drop_fraction": {"type": float, "default": 0.0},
    "min_camera_rows": {"type": int, "default": 0},
    "seed": {"type": int, "default": 0},
    "no_activate": {"action": "store_true"},
}

#: the dest under which a parser records which Fit options it declared
_DECLARED = "fit_option_names"


def add_fit_options(parser: argparse.ArgumentParser, options: Sequence[str] = FIT_OPTIONS,
                    *, pipeline_defaults: bool = False) -> None:
    """Add the Fit flags named in `options` (argparse dests, see FIT_OPTIONS).

    `pipeline_defaults`: --space and --score-adaptation default to the default
    pipeline's values themselves (`envad retrain`, whose job spec records them) instead
    of "" (the server applies the default pipeline's)."""
    unknown = set(options) - set(FIT_OPTIONS)
    if unknown:
        raise ValueError(f"unknown Fit options {sorted(unknown)}; known: {FIT_OPTIONS}")
    group = parser.add_argument_group("fit")
    for dest in FIT_OPTIONS:
        if dest not in options:
            continue
        kwargs = dict(_FLAG_KWARGS[dest])
        if pipeline_defaults and dest in ("space", "score_adaptation"):
            kwargs["default"] = getattr(DEFAULT_PIPELINE, dest)
        group.add_argument("--" + dest.replace("_", "-"), dest=dest,
                           help=FIT_OPTION_HELP[dest], **kwargs)
    parser.set_defaults(**{_DECLARED: tuple(d for d in FIT_OPTIONS if d in options)})


def parse_detectors(text: str) -> tuple[str, ...]:
    """`--detectors` as a tuple of names (empty: the server's default set)."""
    return tuple(d.strip() for d in text.split(",") if d.strip())


def fit_keywords(args: argparse.Namespace) -> dict:
    """The parsed Fit flags of `args` as FitSettings' fields (only the options its parser
    declared with `add_fit_options`)."""
    keywords: dict = {}
    for dest in getattr(args, _DECLARED, ()):
        value = getattr(args, dest)
        if dest == "detectors":
            keywords["detectors"] = parse_detectors(value)
        elif dest == "no_activate":
            keywords["activate"] = not value
        elif dest == "event_gap":
            keywords["event_gap_s"] = value
        else:
            keywords[dest] = value
    return keywords


def fit_settings(args: argparse.Namespace) -> FitSettings:
    """The parsed Fit flags of `args` as the settings of `EnvadClient.fit`."""
    return FitSettings(**fit_keywords(args))
