"""The command-line options that say how to read an archive, shared by `envad backfill`
and `envad scan` (one owner, so the two commands cannot drift apart).

`add_source_arguments` adds them to a parser; `source_options` turns the parsed ones
into `open_source` keyword arguments (--only-env / --only-split are the run's
`envs` / `splits` filters).
"""

from __future__ import annotations

from pathlib import Path

from envad.defaults import MEGADETECTOR_ENV_LEVEL, MEGADETECTOR_MIN_CONF

#: --source-format's choices: "auto" and the names of envad.client.sources.SOURCES
#: (written out so that building the parser imports no source; a test compares them)
FORMATS = ("auto", "camtrap-dp", "coco-camera-traps", "folder", "image-tree", "manifest",
           "megadetector")


def add_source_arguments(parser, *, set_split: bool = True) -> None:
    """The "source" option group. `set_split`: offer --set-split (a command that chooses
    the stored split itself, like `envad scan`, leaves it out)."""
    g = parser.add_argument_group("source")
    g.add_argument("--source-format", default="auto", choices=FORMATS,
                   help="kind of archive")
    if set_split:
        g.add_argument("--set-split", default=None, metavar="SPLIT",
                       help="store every item under this split (default: the source's, "
                            "else archive)")
    g.add_argument("--env-by", choices=["location", "deployment"],
                   help="Camtrap DP: environment from the location (default) or deployment")
    g.add_argument("--skip-non-public", action="store_true",
                   help="Camtrap DP: skip media with filePublic=false (people, by the "
                        "package's rules) instead of scoring them with a flag")
    g.add_argument("--image-root", type=Path,
                   help="MegaDetector, COCO Camera Traps: folder the 'file' / 'file_name' "
                        "paths are relative to (default: the JSON's folder)")
    g.add_argument("--env-level", type=int,
                   help="MegaDetector: folder level of 'file' that is the environment "
                        f"(default: {MEGADETECTOR_ENV_LEVEL})")
    g.add_argument("--skip-empty", action="store_true",
                   help="MegaDetector: skip images without a detection >= --min-conf")
    g.add_argument("--min-conf", type=float,
                   help="MegaDetector: detection confidence for --skip-empty (default: the "
                        f"file's typical_detection_threshold, else {MEGADETECTOR_MIN_CONF:g})")
    g.add_argument("--crops", action="store_true",
                   help="MegaDetector: score each animal detection's crop instead of the "
                        "whole image (one record per crop, joined back to its image)")
    g.add_argument("--crop-min-conf", type=float,
                   help="MegaDetector --crops: least detection confidence of a crop "
                        "(default: --min-conf)")
    g.add_argument("--only-env", action="append", default=[], metavar="ENV",
                   help="only items of this environment (repeatable)")
    g.add_argument("--only-split", action="append", default=[], metavar="SPLIT",
                   help="only items of this split, as the source names it (repeatable)")


def source_options(args) -> dict:
    """The source options the user gave (only those, so each source gets its own)."""
    given = {
        "split": getattr(args, "set_split", None), "env_by": args.env_by,
        "image_root": args.image_root, "env_level": args.env_level,
        "min_conf": args.min_conf, "skip_empty": True if args.skip_empty else None,
        "skip_non_public": True if args.skip_non_public else None,
        "crops": True if args.crops else None, "crop_min_conf": args.crop_min_conf,
    }
    return {k: v for k, v in given.items() if v is not None}

