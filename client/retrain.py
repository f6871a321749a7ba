"""`envad retrain`: roll out a new encoder as one resumable job.

Steps, each recorded in `<workdir>/retrain.json` once done, so that running the same
command again after a failure continues where it stopped (`--until STEP` stops after a
step, e.g. to check the new model before switching):

1. train     pretrain an encoder on a folder-format dataset (envad.training, torch);
             skipped when an already trained encoder file is given (`--model-file`);
2. export    write it as an envad ONNX file (docs/model-format.md);
3. install   copy it atomically into the server's models dir and wait until the server
             lists it;
4. snapshot  export the rows of the encoder being replaced (metadata only) to
             `<workdir>/archive.parquet`: the list of images to re-embed, with their
             ids, environments, labels and splits (skipped when --archive is given);
5. activate  ActivateModel(new id): new requests use the new encoder;
6. reembed   backfill the archive (the snapshot, or --archive) into the new encoder's
             table, with its own checkpoint (resumable like any backfill);
7. fit       fit the detectors on the new table (default split "train").

Exception to the client's dependency rule: steps 1-2 import envad.training (torch),
lazily, only in this job.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from envad.client.backfill import run_backfill
from envad.client.backfill_plan import BackfillOptions
from envad.client.cli_help import EnvadHelpFormatter
from envad.client.command_line import open_client, print_json
from envad.client.fit_options import add_fit_options, fit_keywords
from envad.client.results import RowFilter
from envad.client.sources import open_source
from envad.client.training_bridge import export_encoder, train_encoder
from envad.devices import DEVICE_HELP
from envad.errors import FailedPrecondition, InvalidInput, Unavailable
from envad.pipeline import DEFAULT_PIPELINE
from envad.records import FIT_SPLIT

log = logging.getLogger(__name__)
STEPS = ("train", "export", "install", "snapshot", "activate", "reembed", "fit")
#: the Fit options of the job's refit (client/fit_options.py declares them)
RETRAIN_FIT_OPTIONS = ("detectors", "space", "score_adaptation", "allow_few_rows")


@dataclass(frozen=True)
class RetrainSpec:
    """What the job does; a resumed job must have the same spec."""

    dataset: str
    workdir: str
    model_file: str = ""
    algorithm: str = DEFAULT_PIPELINE.algorithm
    epochs: int = DEFAULT_PIPELINE.epochs
    task: str = DEFAULT_PIPELINE.task
    augment: str = DEFAULT_PIPELINE.augment
    aux: str = DEFAULT_PIPELINE.aux
    hparams: dict = field(default_factory=lambda: dict(DEFAULT_PIPELINE.hparams))
    space: str = DEFAULT_PIPELINE.space
    score_adaptation: str = DEFAULT_PIPELINE.score_adaptation
    seed: int = 0
    image_size: int = 32
    model_id: str = ""
    models_dir: str = ""
    archive: str = ""
    fit_splits: tuple[str, ...] = (FIT_SPLIT,)
    detectors: tuple[str, ...] = ()
    allow_few_rows: bool = False
    batch_size: int = 64
    concurrency: int = 4
    #: where the train step runs (cpu, cuda[:N], auto) and on how many processes: not part
    #: of what the job does, so not of its fingerprint
    device: str = "auto"
    workers: int = 1

    def fingerprint(self) -> str:
        what = {k: v for k, v in asdict(self).items() if k not in ("device", "workers")}
        return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()


@dataclass
class RetrainState:
    """Progress of the job: finished steps and what they produced."""

    fingerprint: str
    done: dict[str, dict] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path, spec: RetrainSpec) -> RetrainState:
        if not path.exists():
            return cls(spec.fingerprint())
        data = json.loads(path.read_text())
        if data.get("fingerprint") != spec.fingerprint():
            raise InvalidInput(f"{path} belongs to a retrain job with other settings; use "
                               "another --workdir or remove it to start over")
        return cls(data["fingerprint"], data.get("done", {}))

    def save(self, path: Path) -> None:
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2))
        os.replace(tmp, path)


def run_retrain(client, spec: RetrainSpec, *, until: str | None = None, progress: bool = True,
                say=lambda msg: print(msg, file=sys.stderr)) -> RetrainState:
    """Run (or continue) the job against the server behind `client`, up to and including
    step `until` (default: all)."""
    if until is not None and until not in STEPS:
        raise InvalidInput(f"unknown step {until!r}; steps: {', '.join(STEPS)}")
    if not spec.dataset and not spec.model_file:
        raise InvalidInput("retrain needs a training dataset or an encoder file")
    workdir = Path(spec.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    state_path = workdir / "retrain.json"
    state = RetrainState.load(state_path, spec)
    for step in STEPS:
        if step in state.done:
            say(f"[{step}] done before: {state.done[step]}")
            continue
        started = time.monotonic()
        result = STEP_FUNCTIONS[step](client, spec, state, progress)
        result["seconds"] = round(time.monotonic() - started, 2)
        state.done[step] = result
        state.save(state_path)
        say(f"[{step}] {result}")
        if step == until:
            break
    return state


# ------------------------------------------------------------------ steps


def _train(client, spec: RetrainSpec, state: RetrainState, progress: bool) -> dict:
    if spec.model_file:
        return {"model_file": spec.model_file, "note": "trained elsewhere"}

    run_dir = train_encoder(spec.dataset, Path(spec.workdir) / "run", algorithm=spec.algorithm,
                            epochs=spec.epochs, seed=spec.seed, image_size=spec.image_size,
                            model_id=spec.model_id or None, task=spec.task,
                            augment=spec.augment, aux=spec.aux, hparams=spec.hparams,
                            progress=progress, device=spec.device, workers=spec.workers)
    return {"run_dir": str(run_dir)}


def _export(client, spec: RetrainSpec, state: RetrainState, progress: bool) -> dict:
    out = Path(spec.workdir) / "encoder.onnx"
    if spec.model_file:
        shutil.copyfile(spec.model_file, out)
    else:
        export_encoder(Path(state.done["train"]["run_dir"]), out)
    meta = onnx_metadata(out)
    if "envad.model_id" not in meta:
        raise InvalidInput(f"{out} is not an envad encoder (no envad.model_id metadata; see "
                           "docs/model-format.md)")
    return {"file": str(out), "model_id": meta["envad.model_id"]}


def _install(client, spec: RetrainSpec, state: RetrainState, progress: bool) -> dict:
    model_id = state.done["export"]["model_id"]
    listing = client.list_models()
    models_dir = Path(spec.models_dir or listing.models_dir)
    if not models_dir.is_dir():
        raise FailedPrecondition(f"models dir {models_dir} is not reachable from here; pass "
                                 "--models-dir (a path to the server's models dir)")
    if any(m.model_id == model_id for m in listing.models):
        return {"model_id": model_id, "models_dir": str(models_dir), "note": "already listed"}
    target = models_dir / f"{model_id}.onnx"
    tmp = models_dir / f".{model_id}.onnx.partial"  # not *.onnx: the server ignores it
    shutil.copyfile(state.done["export"]["file"], tmp)
    os.replace(tmp, target)
    deadline = time.monotonic() + 120
    while not any(m.model_id == model_id for m in client.list_models().models):
        if time.monotonic() > deadline:
            raise Unavailable(f"the server does not list {model_id} after copying {target}")
        time.sleep(0.5)
    return {"model_id": model_id, "file": str(target)}


def _snapshot(client, spec: RetrainSpec, state: RetrainState, progress: bool) -> dict:
    info = client.info()
    previous = info.active_model.model_id if info.active_model else ""
    if spec.archive:
        return {"previous_model": previous, "archive": spec.archive}
    if not previous or previous == state.done["install"]["model_id"]:
        raise FailedPrecondition("no previous encoder to take the archive from; pass --archive")
    out = Path(spec.workdir) / "archive.parquet"
    rows = client.export_parquet(out, with_vectors=False, timeout=None)
    return {"previous_model": previous, "archive": str(out), "rows": rows}


def _activate(client, spec: RetrainSpec, state: RetrainState, progress: bool) -> dict:
    model = client.activate_model(state.done["install"]["model_id"])
    return {"model_id": model.model_id}


def _reembed(client, spec: RetrainSpec, state: RetrainState, progress: bool) -> dict:
    active = client.info().active_model
    if active is None or active.model_id != state.done["activate"]["model_id"]:
        raise FailedPrecondition("the new encoder is no longer active on the server; activate "
                                 f"{state.done['activate']['model_id']} and resume")
    source = open_source(state.done["snapshot"]["archive"])
    summary = run_backfill(
        client, source, Path(spec.workdir) / "reembed.ckpt.jsonl",
        BackfillOptions(batch_size=spec.batch_size, concurrency=spec.concurrency),
        resume=True, progress=progress)
    if summary.failed:
        log.warning("re-embedding: %d items failed:\n%s", summary.failed, summary.format())
    return {"ok": summary.ok + summary.already_done, "failed": summary.failed}


def _fit(client, spec: RetrainSpec, state: RetrainState, progress: bool) -> dict:
    result = client.fit(RowFilter(splits=spec.fit_splits), detectors=spec.detectors,
                        space=spec.space, score_adaptation=spec.score_adaptation,
                        allow_few_rows=spec.allow_few_rows)
    return {"bundle_id": result.bundle_id, "n_samples": result.n_samples,
            "threshold": result.threshold, "space": result.space,
            "score_adaptation": result.score_adaptation}


STEP_FUNCTIONS = {"train": _train, "export": _export, "install": _install,
                  "snapshot": _snapshot, "activate": _activate, "reembed": _reembed,
                  "fit": _fit}


def onnx_metadata(path: Path) -> dict[str, str]:
    """The metadata_props of an ONNX file (read with ONNX Runtime, no onnx package)."""
    import onnxruntime as ort  # ONNX Runtime: an extra (server or gpu)

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return dict(session.get_modelmeta().custom_metadata_map)


# ------------------------------------------------------------------ CLI


def register(subparsers, connection_parser) -> None:
    p = subparsers.add_parser(
        "retrain", parents=[connection_parser(3600.0)], formatter_class=EnvadHelpFormatter,
        help="train, export, install and activate a new encoder, re-embed, refit",
        description="Roll out a new encoder as one resumable job: train -> export -> copy "
                    "into the server's models dir -> snapshot the archive -> ActivateModel "
                    "-> re-embed the archive -> Fit. Run the same command again to resume "
                    "after a failure. See docs/retraining.md.")
    p.add_argument("--data", type=Path,
                   help="folder-format training dataset (metadata.csv + ad_spec.json)")
    p.add_argument("--model-file", type=Path,
                   help="roll out this already trained envad .onnx file instead of training")
    p.add_argument("--workdir", required=True, type=Path,
                   help="job folder: state, training run, exported model, checkpoints")
    p.add_argument("--algorithm", default=DEFAULT_PIPELINE.algorithm,
                   help="pretraining algorithm (registry name; default: the default pipeline's)")
    p.add_argument("--epochs", type=int, default=DEFAULT_PIPELINE.epochs,
                   help="training epochs")
    p.add_argument("--task", default=DEFAULT_PIPELINE.task, choices=("bucket", "class"),
                   help="what supervised algorithms learn")
    p.add_argument("--augment", default=DEFAULT_PIPELINE.augment, choices=("none", "style"),
                   help="style augmentation of supervised batches")
    p.add_argument("--seed", type=int, default=RetrainSpec.seed, help="training seed")
    p.add_argument("--device", default=RetrainSpec.device,
                   help="where the encoder trains: " + DEVICE_HELP)
    p.add_argument("--workers", type=int, default=RetrainSpec.workers,
                   help="processes the encoder trains on, data-parallel (envad train "
                        "--workers, docs/training.md)")
    p.add_argument("--image-size", type=int, default=RetrainSpec.image_size,
                   help="encoder input size in pixels")
    p.add_argument("--model-id", default="",
                   help="id of the new encoder (default: the exporter's)")
    p.add_argument("--models-dir", type=Path,
                   help="the server's models dir as seen from here (default: from ListModels)")
    p.add_argument("--archive", type=Path,
                   help="source to re-embed (default: the rows stored for the previous encoder)")
    p.add_argument("--fit-split", action="append", default=[], metavar="SPLIT",
                   help=f"split the detectors are fit on (repeatable; default {FIT_SPLIT})")
    add_fit_options(p, RETRAIN_FIT_OPTIONS, pipeline_defaults=True)
    p.add_argument("--batch-size", type=int, default=RetrainSpec.batch_size,
                   help="re-embedding batch size")
    p.add_argument("--concurrency", type=int, default=RetrainSpec.concurrency,
                   help="re-embedding requests in flight")
    p.add_argument("--until", choices=STEPS, help="stop after this step (resume later)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--json", action="store_true",
                   help="print the job's finished steps and their results as JSON")
    p.set_defaults(func=cmd_retrain)


def cmd_retrain(args) -> int:
    if (args.data is None) == (args.model_file is None):
        raise SystemExit("envad retrain: give exactly one of --data (train a new encoder) "
                         "or --model-file (roll out a trained one)")
    spec = RetrainSpec(
        dataset=str(args.data.resolve()) if args.data else "",
        workdir=str(args.workdir.resolve()),
        model_file=str(args.model_file.resolve()) if args.model_file else "",
        algorithm=args.algorithm, epochs=args.epochs, task=args.task, augment=args.augment,
        seed=args.seed,
        image_size=args.image_size, model_id=args.model_id,
        models_dir=str(args.models_dir.resolve()) if args.models_dir else "",
        archive=str(args.archive.resolve()) if args.archive else "",
        fit_splits=tuple(args.fit_split) or (FIT_SPLIT,), **fit_keywords(args),
        batch_size=args.batch_size, concurrency=args.concurrency, device=args.device,
        workers=args.workers,
    )
    with open_client(args) as client:
        state = run_retrain(client, spec, until=args.until, progress=not args.no_progress)
    if args.json:
        print_json({"finished": "fit" in state.done, "done": state.done})
        return 0
    if "fit" not in state.done:
        print(f"stopped after {args.until}; run the same command without --until to go on")
        return 0
    fit = state.done["fit"]
    print(f"retrained: model {state.done['activate']['model_id']} active, "
          f"{state.done['reembed']['ok']} rows re-embedded, bundle {fit['bundle_id']} "
          f"({fit['n_samples']} samples)")
    return 0
