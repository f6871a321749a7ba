"""`envad data`, `envad train`, `envad export`: the training part of the command line.

Registration imports nothing heavy; torch is imported inside the handlers only, so
`envad --help` stays fast and torch-free.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from envad.devices import DEVICE_HELP
from envad.errors import InvalidInput

#: the registry's names, listed here so that building the parser needs no torch
#: (tests/training/test_training_cli.py checks they match the registry)
ALGORITHMS = ("random", "erm", "irm", "fish", "lisa", "groupdro", "coral", "mocov3",
              "ea_mocov3")
#: batches.TASKS and augment.STYLE_AUGMENTS (checked by the same test)
TASKS = ("bucket", "class")
AUGMENTS = ("none", "style", "style_mix")
AUX = ("none", "rotation", "contrastive")
#: photodigits.RECIPES (checked by the same test)
RECIPE_NAMES = ("standard", "holdout", "shapes")


#: every training command's help shows its defaults
_FORMATTER = argparse.ArgumentDefaultsHelpFormatter


def register(subparsers) -> None:
    register_data(subparsers)
    register_train(subparsers)
    register_export(subparsers)


def register_data(subparsers) -> None:
    data = subparsers.add_parser(
        "data", help="generate built-in datasets",
        description="Generate a built-in dataset in the folder format.")
    kinds = data.add_subparsers(dest="dataset", metavar="DATASET", required=True)
    p = kinds.add_parser(
        "photodigits", formatter_class=_FORMATTER,
        help="PhotoDigits: real digits on real photos, 6 training + 3 unseen cameras",
        description="Write PhotoDigits (docs/training.md): 4800 images from "
                    "6 styled training cameras (normals only) and 900 from 3 unseen test "
                    "cameras (40% anomalies), as metadata.csv + ad_spec.json + PNGs, "
                    "plus digits.npz (clean 8x8 content). Deterministic for a seed.")
    p.add_argument("--out", type=Path, required=True, help="output directory")
    p.add_argument("--size", type=int, choices=(32, 64), default=32, help="image side (px)")
    p.add_argument("--seed", type=int, default=0, help="generator seed")
    p.add_argument("--recipe", choices=RECIPE_NAMES, default="standard",
                   help="which cameras and content: 'standard' (the benchmark every default "
                        "was chosen on), 'holdout' (nine other cameras, another digit "
                        "split: for checking that the defaults carry over) or 'shapes' "
                        "(procedural shapes with near-neighbour classes, other cameras: a "
                        "second content family to select on)")
    p.add_argument("--train-per-camera", type=int, default=800,
                   help="images per training camera (train and val splits); fewer make a "
                        "smaller dataset to try things on, not the benchmark")
    p.add_argument("--test-per-camera", type=int, default=300,
                   help="images per unseen test camera (40%% anomalies)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_photodigits)


def register_train(subparsers) -> None:
    p = subparsers.add_parser(
        "train", formatter_class=_FORMATTER,
        help="pretrain an env-aware encoder and export it to ONNX",
        description="Pretrain a ResNet-18 encoder on the normal images of the training "
                    "cameras, validate each epoch on the val split, checkpoint each epoch, "
                    "and export RUN/encoder.onnx. Re-running a finished run with the same "
                    "settings does nothing.")
    p.add_argument("--data", required=True,
                   help="dataset: a folder-format DIR, or iwildcam:ROOT[?option=value&...]")
    p.add_argument("--algorithm", required=True, choices=ALGORITHMS, metavar="NAME",
                   help="one of: " + ", ".join(ALGORITHMS))
    p.add_argument("--out", type=Path, required=True, help="run directory")
    p.add_argument("--size", type=int, default=32, help="input image side (px)")
    p.add_argument("--epochs", type=int, default=5, help="training epochs")
    p.add_argument("--batch-size", type=int, default=64, help="images per step")
    p.add_argument("--envs-per-step", type=int, default=4,
                   help="environments sampled per step")
    p.add_argument("--seed", type=int, default=0, help="seed (init, sampling, augmentation)")
    p.add_argument("--device", default="cpu", help=DEVICE_HELP)
    p.add_argument("--workers", type=int, default=1,
                   help="processes training data-parallel (torch.distributed: gloo on "
                        "the CPU, NCCL on CUDA with one GPU each); each takes an equal "
                        "share of every camera's images of a step, so it must divide "
                        "batch-size / envs-per-step")
    p.add_argument("--task", choices=TASKS, default="bucket",
                   help="what supervised algorithms learn: the paper's two normal buckets, "
                        "or every normal class label")
    p.add_argument("--augment", choices=AUGMENTS, default="none",
                   help="per-image style augmentation of supervised batches (brightness, "
                        "contrast, colour gain, greyscale, blur, noise, crop, flip); "
                        "style_mix adds MixStyle on the encoder's early feature maps")
    p.add_argument("--aux", choices=AUX, default="none",
                   help="self-supervised auxiliary loss of supervised algorithms: rotation "
                        "= predict each image's right-angle turn (weight 0.5); "
                        "contrastive = SimCLR's NT-Xent on two augmented views of each "
                        "image (weight 0.5, temperature 0.5)")
    p.add_argument("--hparam", action="append", default=[], metavar="KEY=VALUE",
                   help="override an algorithm hyperparameter (repeatable), e.g. lr=1e-4, "
                        "schedule=cosine, warmup_fraction=0.05")
    p.add_argument("--weights", help="torchvision ResNet-18 state_dict to start from: a "
                                      "local file, or `imagenet` for torchvision's ImageNet "
                                      "weights (downloaded once into $TORCH_HOME; offline, "
                                      "copy the file there or pass a FILE)")
    p.add_argument("--model-id", help="id of the exported model (default derived)")
    p.add_argument("--keep-checkpoints", type=int, default=2,
                   help="newest checkpoints to keep (0: all)")
    p.add_argument("--resume", action="store_true",
                   help="continue an interrupted run after its last complete epoch")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=cmd_train)


def register_export(subparsers) -> None:
    p = subparsers.add_parser(
        "export", formatter_class=_FORMATTER, help="export a run's encoder to ONNX",
        description="Write the encoder of a training run's newest checkpoint as an envad "
                    "model file (docs/model-format.md) and check torch/ONNX Runtime parity "
                    "(max abs difference <= 1e-4) on real images of the run's dataset.")
    p.add_argument("run", type=Path, help="training run directory")
    p.add_argument("--out", type=Path, required=True, help="output .onnx file")
    p.add_argument("--model-id", help="model id (default derived from the run)")
    p.set_defaults(func=cmd_export)


def parse_hparams(items: list[str]) -> dict:
    """KEY=VALUE strings -> dict; values are JSON when they parse (1e-4, true), else text."""
    result = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise argparse.ArgumentTypeError(f"--hparam needs KEY=VALUE, got {item!r}")
        try:
            result[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            result[key.strip()] = value
    return result


def cmd_photodigits(args) -> int:
    from envad.training.photodigits import generate  # SciPy, scikit-image ([train])

    out = generate(args.out, size=args.size, seed=args.seed, progress=not args.quiet,
                   recipe=args.recipe, train_per_camera=args.train_per_camera,
                   test_per_camera=args.test_per_camera)
    print(f"PhotoDigits ({args.recipe} recipe, {args.size} px, seed {args.seed}) "
          f"written to {out}")
    return 0


def cmd_train(args) -> int:
    # training's code ([train]): `envad --help` loads none of it
    from envad.training.run_images import DecodeAhead, ahead_enabled

    # the run's images are decoded in a child process while this one imports torch
    ahead = DecodeAhead(args.data, size=args.size, seed=args.seed, task=args.task) \
        if ahead_enabled() else None
    try:
        # torch ([train]), imported while the child process decodes
        from envad.training.pretrained import resolve_weights
        from envad.training.run import ENCODER_FILE, TrainConfig, read_run, train
        from envad.training.run_files import last_val_metrics

        try:
            hparams = parse_hparams(args.hparam)
            config = TrainConfig(
                data=args.data, algorithm=args.algorithm, out=args.out, size=args.size,
                epochs=args.epochs, batch_size=args.batch_size, seed=args.seed,
                device=args.device, envs_per_step=args.envs_per_step, hparams=hparams,
                weights=resolve_weights(args.weights), keep_checkpoints=args.keep_checkpoints,
                model_id=args.model_id, task=args.task, augment=args.augment, aux=args.aux,
                workers=args.workers)
            run_dir = train(config, progress=not args.quiet, resume=args.resume, ahead=ahead)
        except (ValueError, TypeError, argparse.ArgumentTypeError) as exc:
            raise InvalidInput(str(exc)) from exc
    finally:
        if ahead is not None:
            ahead.close()
    run = read_run(run_dir)
    metrics = ", ".join(f"{k} {v:.3f}" for k, v in last_val_metrics(run).items())
    print(f"run: {run_dir}  ({metrics or 'no val split'})")
    print(f"encoder: {run_dir / ENCODER_FILE}  model id {run['export']['model_id']}")
    return 0


def cmd_export(args) -> int:
    from envad.training.export import export_onnx  # torch and ONNX ([train])

    report = export_onnx(args.run, args.out, model_id=args.model_id)
    print(f"wrote {report.path} (model id {report.model_id}, max abs diff "
          f"{report.max_abs_diff:.3g})")
    return 0
