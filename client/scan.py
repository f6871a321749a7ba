"""The one-shot mode: embed an archive, fit on its normal images (or a reference
archive), score it, report the most anomalous images; no server to run.

It runs the scoring service itself, in this process: `envad.server.app.start` (the
same engine, store, detectors and converters as `envad serve`) on a private loopback
port guarded by a one-time token, driven by the same client, backfill and score
writers as the server path. Nothing keeps running afterwards. The server's packages
(the `server` extra) are imported only when a scan runs.

Every image is embedded once. The first pass stores the fit rows (split `scan-normal`,
or `scan-reference` for --reference; images the source marks as anomalies go to
`scan-anomalous` and are not fit on); with --reference the archive's images are stored
too (split `scan-archive`, not fit on), because a camera's score statistics come from
its stored images. The detectors are fitted on the fit rows, then every image of the
archive is scored without storing it again, from its stored embedding (Score's
`reuse_stored`).
"""

from __future__ import annotations

import contextlib
import heapq
import logging
import os
import secrets
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

from envad.client.backfill import run_backfill
from envad.client.backfill_plan import BackfillOptions, job_header
from envad.client.backfill_report import FailureGroups, score_records
from envad.client.checkpoint import Checkpoint
from envad.client.fit_choice import few_rows_warning
from envad.client.library import EnvadClient
from envad.client.progress import wait_with_progress
from envad.client.results import RowFilter
from envad.client.sources import Source, SourceItem, open_source
from envad.errors import FailedPrecondition, InvalidInput

NORMAL_SPLIT = "scan-normal"
ANOMALOUS_SPLIT = "scan-anomalous"
REFERENCE_SPLIT = "scan-reference"
ARCHIVE_SPLIT = "scan-archive"
TOP_FIELDS = ("key", "env", "ensemble", "is_anomaly", "uri", "id")
QUIET_LOGGERS = ("envad.server", "envad.access", "faiss", "faiss.loader")


@dataclass(frozen=True)
class ScanOptions:
    """What `envad scan` was asked to do (see its --help)."""

    source: Path
    model: Path
    reference: Path | None = None
    source_format: str = "auto"
    source_options: dict = field(default_factory=dict)   # open_source's keyword arguments
    envs: tuple[str, ...] = ()       # only items of these environments (empty: all)
    splits: tuple[str, ...] = ()     # only items of these splits, as the source names them
    data_dir: Path | None = None
    scores_out: Path | None = None
    top: int = 20
    detectors: tuple[str, ...] = ()
    space: str = ""
    score_adaptation: str = ""       # "": the server's default (the default pipeline's)
    contamination: float = 0.0
    allow_few_rows: bool = False
    event_gap_s: float = 0.0         # 0: the server's default (60 s); < 0: each image alone
    batch_size: int = 64
    progress: bool = True


@dataclass
class ScanReport:
    """The outcome of a scan: what was fitted on, counts, and the top anomalies."""

    source: str
    model_id: str
    fit_on: str
    fit_rows: int
    bundle_id: str
    threshold: float
    embedded: int = 0     # images the encoder embedded (each image of the run once)
    scored: int = 0
    anomalies: int = 0
    failed: int = 0
    skipped: int = 0
    top: list[dict] = field(default_factory=list)
    scores_out: str = ""
    warnings: list[str] = field(default_factory=list)
    fit_groups: str = ""  # how a scored fit image leaves its event out (FitResult.fit_groups)
    failures: FailureGroups = field(default_factory=FailureGroups)  # by reason, files named

    def as_dict(self) -> dict:
        out = {k: getattr(self, k) for k in self.__dataclass_fields__}
        out["failures"] = self.failures.as_list()
        return out

    def format(self) -> str:
        lines = [*self.warnings,
                 f"scan of {self.source} with model {self.model_id}: fitted on {self.fit_on} "
                 f"({self.fit_rows} images), bundle {self.bundle_id}, threshold "
                 f"{self.threshold:.3f}",
                 f"embedded {self.embedded}, scored {self.scored}, anomalies "
                 f"{self.anomalies}, failed {self.failed}, skipped {self.skipped}"]
        if self.fit_groups:
            lines.append(self.fit_groups)
        if self.failures:
            lines.append(f"failed {self.failed}:")
            lines += self.failures.lines(indent="  ")
        if self.scores_out:
            lines.append(f"scores -> {self.scores_out}")
        if self.top:
            lines.append(f"most anomalous {len(self.top)}:")
            width = max(len(r["key"]) for r in self.top)
            lines += [f"  {r['ensemble']:.3f}  {'ANOMALY' if r['is_anomaly'] else 'normal '}  "
                      f"{r['key']:<{width}}  {r['env']}" for r in self.top]
        return "\n".join(lines)


class FitRowsSource(Source):
    """The items of an archive that `wanted` keeps (its environment and split filters,
    on the archive's own splits), carrying the scan's fit split: `split` for every
    item, or, without one, `scan-normal` / `scan-anomalous` from what the archive says."""

    name = "scan-fit-rows"

    def __init__(self, inner: Source, split: str | None = None,
                 wanted: Callable[[SourceItem], bool] = lambda item: True) -> None:
        self.inner = inner
        self.path = inner.path
        self.split_override = None
        self.split = split
        self.wanted = wanted

    @classmethod
    def detect(cls, path: Path) -> bool:
        return False

    @property
    def image_root(self) -> Path:
        return self.inner.image_root

    def _split_of(self, item: SourceItem) -> str:
        if self.split:
            return self.split
        return ANOMALOUS_SPLIT if item.extra.get("is_anomaly") is True else NORMAL_SPLIT

    def __iter__(self) -> Iterator[SourceItem]:
        for item in self.inner:
            if self.wanted(item):
                yield replace(item, split=self._split_of(item))

    def describe(self) -> dict[str, str]:
        return {**self.inner.describe(), "scan_split": self.split or "by is_anomaly"}


def run_scan(options: ScanOptions) -> ScanReport:
    """Scan `options.source`; see the module docstring."""
    if not options.model.is_file():
        raise InvalidInput(f"--model {options.model}: no such encoder file")
    if options.model.suffix.lower() != ".onnx":
        raise InvalidInput(f"--model {options.model}: an envad encoder is an .onnx file "
                           "(docs/model-format.md)")
    if options.top < 0 or options.batch_size < 1:
        raise InvalidInput("--top must be >= 0 and --batch-size >= 1")
    source = open_source(options.source, options.source_format, **options.source_options)
    reference = (open_source(options.reference, options.source_format,
                             **options.source_options) if options.reference else None)
    with _data_dir(options.data_dir) as data_dir, _quiet_server_logs(), \
            _in_process_service(options.model, data_dir) as (client, embedded):
        return _scan(client, source, reference, options, data_dir, embedded)


def _scan(client, source: Source, reference: Source | None, options: ScanOptions,
          data_dir: Path, embedded: Callable[[], int]) -> ScanReport:
    checkpoints = data_dir / "checkpoints"
    score_options = BackfillOptions(batch_size=options.batch_size, concurrency=2,
                                    envs=options.envs, splits=options.splits,
                                    scores=True, store=False, reuse_stored=True)
    fit_source = (FitRowsSource(reference, REFERENCE_SPLIT) if reference
                  else FitRowsSource(source, wanted=score_options.wants))
    fit_split = REFERENCE_SPLIT if reference else NORMAL_SPLIT
    store = run_backfill(client, fit_source, _checkpoint(checkpoints, "store", fit_source),
                         BackfillOptions(batch_size=options.batch_size, concurrency=2),
                         resume=True, progress=options.progress and "store fit images")
    if not store.ok and not store.already_done:
        raise FailedPrecondition(f"no image of {fit_source.path} could be stored: "
                                 f"{dict(store.failed_reasons) or dict(store.skipped)}")
    if reference:      # the archive's cameras learn their score statistics from it
        archive = FitRowsSource(source, ARCHIVE_SPLIT, wanted=score_options.wants)
        run_backfill(client, archive, _checkpoint(checkpoints, "archive", archive),
                     BackfillOptions(batch_size=options.batch_size, concurrency=2),
                     resume=True, progress=options.progress and "store the archive")
    what = (f"the reference {options.reference}" if reference
            else f"the normal images of {options.source}")
    fit = wait_with_progress(
        lambda: client.fit(RowFilter(splits=(fit_split,)), detectors=options.detectors,
                           space=options.space, score_adaptation=options.score_adaptation,
                           contamination=options.contamination,
                           allow_few_rows=options.allow_few_rows,
                           event_gap_s=options.event_gap_s, timeout=None),
        "fit", enabled=options.progress)
    warning = few_rows_warning(fit.n_samples)
    scores_out = options.scores_out or (data_dir / "scores.jsonl")
    score_checkpoint = _checkpoint(checkpoints, f"score-{fit.bundle_id}", source)
    run_backfill(client, source, score_checkpoint, score_options, resume=True,
                 scores_out=scores_out, progress=options.progress and "score")
    report = ScanReport(
        source=str(options.source), model_id=fit.provenance.model_id, fit_on=what,
        fit_rows=fit.n_samples, bundle_id=fit.bundle_id, threshold=fit.threshold,
        scores_out=str(scores_out) if options.scores_out or options.data_dir else "",
        warnings=[f"envad: {warning}"] if warning else [], embedded=embedded(),
        fit_groups=fit.fit_groups,
    )
    _summarise(report, _score_records(client, source, score_options, score_checkpoint),
               options.top)
    return report


def _summarise(report: ScanReport, records: Iterable[dict], top: int) -> None:
    """Count the score records and keep the `top` highest, streaming (any archive size)."""
    best: list[tuple[float, int, dict]] = []
    for n, record in enumerate(records):
        if record["status"] != "ok" or record["ensemble"] is None:
            report.failed += record["status"] == "failed"
            if record["status"] == "failed":
                report.failures.add(record["key"], record["code"], record["reason"],
                                    (record["id"], record["uri"]))
            report.skipped += record["status"] == "skipped"
            continue
        report.scored += 1
        report.anomalies += bool(record["is_anomaly"])
        entry = (record["ensemble"], -n, {k: record[k] for k in TOP_FIELDS})
        if len(best) < top:
            heapq.heappush(best, entry)
        elif top and entry[:2] > best[0][:2]:
            heapq.heapreplace(best, entry)
    report.top = [entry[2] for entry in sorted(best, key=lambda e: e[:2], reverse=True)]


def _checkpoint(folder: Path, step: str, source: Source) -> Path:
    name = Path(source.describe()["path"]).name or "source"
    return folder / f"scan-{step}-{name}.jsonl"


def _score_records(client, source: Source, options: BackfillOptions, path: Path
                   ) -> Iterator[dict]:
    """The score records of the run, streamed back from its checkpoint journal."""
    info = client.info()
    bundle_id = info.bundle.bundle_id if info.bundle else ""
    header = job_header(source, options, info.active_model.model_id, info.data_dir,
                        bundle_id=bundle_id)
    with Checkpoint(path, header, resume=True) as checkpoint:
        yield from score_records(checkpoint.outcomes(), bundle_id)


@contextlib.contextmanager
def _data_dir(given: Path | None) -> Iterator[Path]:
    if given is not None:
        given.mkdir(parents=True, exist_ok=True)
        yield given.resolve()
        return
    with tempfile.TemporaryDirectory(prefix="envad-scan-") as tmp:
        yield Path(tmp)


@contextlib.contextmanager
def _quiet_server_logs() -> Iterator[None]:
    """The in-process service logs every call and every refused model file; a scan
    reports through its own output (with `envad -v` everything is logged)."""
    if logging.getLogger().level <= logging.DEBUG:
        yield
        return
    loggers = [logging.getLogger(name) for name in QUIET_LOGGERS]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)


@contextlib.contextmanager
def _in_process_service(model: Path, data_dir: Path):
    """The envad service over `data_dir`, in this process, serving `model`; yields a
    client connected to it and a function counting the images its encoder embedded so
    far (from the service's own metrics), and stops it on the way out."""
    # the server itself (the server extra), run in this process
    from envad.server.app import start
    from envad.server.config import load_config

    models_dir = data_dir / "models"
    models_dir.mkdir(parents=True, exist_ok=True)
    installed = models_dir / model.name
    _install_model(model, installed)
    token = secrets.token_hex(16)
    config = load_config(overrides={
        "host": "127.0.0.1", "port": 0, "data_dir": data_dir, "models_dir": models_dir,
        "metrics_port": 0, "auth_token": token, "tls_cert_file": None, "tls_key_file": None,
    })
    running = start(config)
    try:
        with EnvadClient(f"127.0.0.1:{running.port}", token=token, timeout=600.0) as client:
            listing = client.list_models()   # the service scanned the models dir on start
            mine = [m for m in listing.models if Path(m.file).name == installed.name]
            if not mine:
                why = running.engine.registry.problems.get(installed.name, "")
                raise InvalidInput(f"--model {model}: not a usable envad encoder "
                                   f"(docs/model-format.md): {why}".rstrip(": "))
            if not mine[0].active:
                client.activate_model(mine[0].model_id)
            yield client, lambda: _images_embedded(running.engine.metrics)
    finally:
        running.stop(grace=1.0)


def _images_embedded(metrics) -> int:
    """Images through the encoder since the service started: the sum of its
    `envad_batch_images` histogram (one observation per ONNX Runtime call)."""
    value = metrics.registry.get_sample_value("envad_batch_images_sum")
    return int(value or 0)


def _install_model(model: Path, target: Path) -> None:
    """Put the encoder file into the scan's models dir (a hard link when possible)."""
    if target.exists() and target.stat().st_size == model.stat().st_size and \
            target.read_bytes() == model.read_bytes():
        return
    target.unlink(missing_ok=True)
    try:
        os.link(model, target)
    except OSError:
        shutil.copyfile(model, target)
