"""Archive backfill through the service: stream every image of a source into the store.

Items are read and sent in batches by a small thread pool (one Ingest stream per batch,
or one Score(store=true) call when per-image scores are wanted). A batch that fails with
a transient error is retried with backoff; items the server rejects are recorded as
failed with the server's reason and never abort the run. Every finished batch is
recorded in the checkpoint journal before it counts, so `resume=True` after a crash or
Ctrl-C sends only what is not acknowledged yet; the server's idempotency by id makes a
batch that was in flight at the crash harmless to send again.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace
from pathlib import Path

from tqdm import tqdm

from envad.client.backfill_plan import (
    BackfillOptions,
    check_some_wanted,
    count_wanted,
    item_outcome,
    job_header,
    plan_batches,
)
from envad.client.backfill_report import BackfillInterrupted, BackfillSummary, score_records
from envad.client.checkpoint import Checkpoint, Outcome
from envad.client.content_index import ContentIndex, duplicate_outcome
from envad.client.events import group_events
from envad.client.library import EnvadClient
from envad.client.results import ImageInput, IngestInput, sha256_hex
from envad.client.retry import backoff_delays
from envad.client.sources import Source, SourceItem
from envad.client.sources.exif import exif_timestamp
from envad.client.writers import format_for, write_scores
from envad.errors import EnvadError, FailedPrecondition, InvalidInput

log = logging.getLogger(__name__)


@dataclass
class _Batch:
    items: list[SourceItem]
    outcomes: list[Outcome] = field(default_factory=list)
    inserted: int = 0
    duplicates: int = 0


def run_backfill(
    client: EnvadClient,
    source: Source,
    checkpoint_path: str | Path,
    options: BackfillOptions = BackfillOptions(),
    *,
    resume: bool = False,
    scores_out: str | Path | None = None,
    scores_format: str = "auto",
    progress: bool | str = True,
    event_gap_s: float = 0.0,
) -> BackfillSummary:
    """Backfill `source` into the server behind `client`; returns the run's summary.

    Raises FailedPrecondition when the server has no active encoder (or, for scores, no
    fitted detectors). On Ctrl-C the finished batches stay recorded, the score output is
    written for them, and BackfillInterrupted (a KeyboardInterrupt) carries the summary.
    `progress`: show a progress bar on stderr (a string: with that label).
    `event_gap_s` > 0 groups the score records into events (envad.client.events).
    """
    _check_outputs(source, options, scores_out, scores_format, event_gap_s)
    info = client.info()
    if info.active_model is None:
        raise FailedPrecondition(f"the server has no active encoder: {info.hint}")
    if options.scores and info.bundle is None:
        raise FailedPrecondition(f"scores need fitted detectors: {info.hint}")
    check_some_wanted(source, options)
    bundle_id = info.bundle.bundle_id if options.scores and info.bundle else ""
    header = job_header(source, options, info.active_model.model_id, info.data_dir,
                        bundle_id=bundle_id)
    summary = BackfillSummary(model_id=info.active_model.model_id, bundle_id=bundle_id)
    content = (ContentIndex.from_server(client)
               if options.store and options.skip_duplicates else None)
    # a scoring job is one run per bundle: a finished run of this bundle is taken up
    # again by the same command (new images scored, the outputs rendered again)
    with Checkpoint(checkpoint_path, header, resume=resume,
                    rerun=options.scores) as checkpoint:
        summary.run = checkpoint.opened_as
        try:
            _run(client, source, checkpoint, options, summary, progress, content,
                 bundle_id)
            if not options.limit:
                checkpoint.mark_complete()
        except KeyboardInterrupt as exc:
            summary.interrupted = True
            raise BackfillInterrupted(summary) from exc
        finally:
            summary.elapsed_s = time.monotonic() - summary.started
            if scores_out is not None:
                summary.scores_written = write_scores(
                    scores_out, _records_of(checkpoint, event_gap_s, bundle_id),
                    scores_format,
                    info=_megadetector_info(source),
                )
                summary.scores_out = str(scores_out)
    return summary


def _check_outputs(source: Source, options: BackfillOptions, scores_out: str | Path | None,
                   scores_format: str, event_gap_s: float) -> None:
    """Refuse score output options that do not go together."""
    if scores_out is not None and not options.scores:
        raise InvalidInput("scores_out needs options.scores=True")
    if event_gap_s < 0 or (event_gap_s and scores_out is None):
        raise InvalidInput("--group-events takes seconds > 0 and needs --scores-out")
    if scores_out is not None and format_for(scores_out, scores_format) == "camtrap-dp" \
            and source.name != "camtrap-dp":
        raise InvalidInput("--scores-format camtrap-dp needs a Camtrap DP source")


def _run(client, source, checkpoint, options, summary, progress, content=None,
         bundle_id: str = "") -> None:
    bar = tqdm(total=count_wanted(source, options), unit="img",
               desc=progress if isinstance(progress, str) else "backfill",
               disable=not progress, smoothing=0.1)
    throttle = _Throttle(options.rate_limit)
    in_flight: set[Future] = set()
    with ThreadPoolExecutor(options.concurrency, thread_name_prefix="backfill") as pool:
        try:
            for planned in plan_batches(source, options, checkpoint.is_done,
                                        options.batch_size):
                summary.already_done += planned.already_done
                bar.update(planned.already_done)
                batch = _Batch(planned.items, planned.skipped)
                if not batch.items:  # skipped items (or finished ones) only
                    _finish(checkpoint, batch, summary, bar)
                    continue
                throttle.wait(len(batch.items))
                in_flight.add(pool.submit(_send, client, batch, options, content,
                                          bundle_id))
                while len(in_flight) >= 2 * options.concurrency:
                    _collect(in_flight, checkpoint, summary, bar, block=True)
            while in_flight:
                _collect(in_flight, checkpoint, summary, bar, block=True)
        except BaseException:
            # Ctrl-C or a fatal error: send nothing new, let running batches finish and
            # record them; anything not recorded is simply re-sent on resume.
            for future in in_flight:
                future.cancel()
            pool.shutdown(wait=True)
            _collect(in_flight, checkpoint, summary, bar, block=False)
            raise
        finally:
            bar.close()


def _collect(in_flight: set[Future], checkpoint, summary, bar, *, block: bool) -> None:
    """Record finished batches and drop them from `in_flight`; with block, wait for at
    least one and re-raise the first batch that failed fatally (after recording the rest)."""
    if block:
        done, _ = wait(in_flight, return_when=FIRST_COMPLETED)
    else:
        done = {f for f in in_flight if f.done()}
    in_flight.difference_update(done)
    errors: list[BaseException] = []
    for future in done:
        if future.cancelled():
            continue
        exc = future.exception()
        if exc is not None:
            errors.append(exc)
        else:
            _finish(checkpoint, future.result(), summary, bar)
    if errors and block:
        raise errors[0]


def _finish(checkpoint: Checkpoint, batch: _Batch, summary: BackfillSummary, bar) -> None:
    summary.new_items += sum(1 for o in batch.outcomes if not checkpoint.seen(o.key))
    checkpoint.record(batch.outcomes)
    summary.add(batch.outcomes, batch.inserted, batch.duplicates)
    bar.update(len(batch.outcomes))
    bar.set_postfix(ok=summary.ok, failed=summary.failed, refresh=False)


# ------------------------------------------------------------------ one batch (worker)


def _send(client: EnvadClient, batch: _Batch, options: BackfillOptions,
          content: ContentIndex | None = None, bundle_id: str = "") -> _Batch:
    """Read, send and retry one batch; every item ends with exactly one outcome.

    An image whose content is stored under another id (`content`) is skipped when
    ingesting, and scored without being stored again when scoring."""
    pending, copies = _read_items(batch, options, content)
    delays = backoff_delays(options.batch_retry)
    retry_codes = options.batch_retry.retry_codes
    while pending:
        try:
            outcomes = (_score(client, pending, options, copies, bundle_id) if options.scores
                        else _ingest(client, pending, batch, options))
        except EnvadError as exc:
            if exc.code not in retry_codes and exc.code != "INVALID_ARGUMENT":
                raise  # request-level problem (no model, bad token): stop the run
            outcomes = [(item, image, exc.code, str(exc), None) for item, image in pending]
        retry = []
        for item, image, code, reason, score in outcomes:
            if code in retry_codes:
                retry.append((item, image, code, reason))
            elif code:
                batch.outcomes.append(item_outcome(item, "failed", image.id, code, reason,
                                               keep_item=options.scores))
            else:
                batch.outcomes.append(item_outcome(item, "ok", image.id, score=score,
                                               keep_item=options.scores))
        delay = next(delays, None) if retry else None
        if retry and delay is None:
            for item, image, code, reason in retry:
                batch.outcomes.append(item_outcome(item, "failed", image.id, code,
                                               f"gave up after retries: {reason}",
                                               keep_item=options.scores))
            retry = []
        pending = [(item, image) for item, image, _, _ in retry]
        if pending:
            assert delay is not None    # retries left, or `retry` was emptied above
            log.info("retrying %d items in %.1fs (%s)", len(pending), delay, retry[0][3])
            time.sleep(delay)
    return batch


def _read_items(batch: _Batch, options: BackfillOptions, content: ContentIndex | None
                ) -> tuple[list[tuple[SourceItem, ImageInput]], set[str]]:
    """The batch's readable items as requests, and the keys of those stored under another id.

    An unreadable item, or (when ingesting) a copy of stored content, gets its outcome here."""
    pending: list[tuple[SourceItem, ImageInput]] = []
    copies: set[str] = set()      # keys of items whose content is stored already
    for item in batch.items:
        try:
            data = item.read_bytes()
        except OSError as exc:
            batch.outcomes.append(item_outcome(item, "failed", code="READ_ERROR",
                                           reason=f"cannot read {item.uri}: {exc}",
                                           keep_item=options.scores))
            continue
        if item.timestamp is None:
            item = replace(item, timestamp=exif_timestamp(data))
        sha = sha256_hex(data)
        image = ImageInput(data=data, id=item.id or sha, env=item.env,
                           timestamp=item.timestamp, uri=item.uri, event=item.event)
        duplicate = duplicate_outcome(content, item, sha, image.id)
        if duplicate is not None and not options.scores:
            batch.outcomes.append(duplicate)
            continue
        if duplicate is not None:
            copies.add(item.key)
        pending.append((item, image))
    return pending, copies


def _ingest(client, pending, batch: _Batch, options) -> list[tuple]:
    summary = client.ingest([
        IngestInput(image=image, label=item.label, split=item.split) for item, image in pending
    ])
    batch.inserted += summary.inserted
    batch.duplicates += summary.duplicates
    failures = {f.index: f for f in summary.failures}
    return [
        (item, image, failures[i].code, failures[i].message, None) if i in failures
        else (item, image, "", "", None)
        for i, (item, image) in enumerate(pending)
    ]


def _score(client, pending, options, copies: frozenset[str] | set[str] = frozenset(),
           bundle_id: str = "") -> list[tuple]:
    """Score (and store) the batch, one call per (split, label, store) group; items in
    `copies` (content stored under another id) are scored without storing. A group
    whose every image is refused is asked again for each image's own error, so that one
    group's bad images never fail the batch's other groups. Scores of
    another bundle than `bundle_id` (a refit during the run) stop the run."""
    groups: dict[tuple[str, str, bool], list[tuple[SourceItem, ImageInput]]] = {}
    for item, image in pending:
        store = options.store and item.key not in copies
        groups.setdefault((item.split, item.label, store), []).append((item, image))
    out: list[tuple[SourceItem, ImageInput, str, str, dict | None]] = []
    for (split, label, store), members in groups.items():
        images = [image for _, image in members]
        try:
            result = client.score(images, store=store, split=split, label=label,
                                  reuse_stored=options.reuse_stored)
        except EnvadError as exc:
            if exc.code != "INVALID_ARGUMENT":
                raise
            # every image of the group was refused and the server joined their reasons
            # into one error: ask again for each image's own (a request-level problem
            # raises again)
            result = client.score(images, store=store, split=split, label=label,
                                  reuse_stored=options.reuse_stored, per_item_errors=True)
        prov = result.provenance
        if bundle_id and prov.bundle_id and prov.bundle_id != bundle_id and any(
                res.error is None for res in result.results):
            raise FailedPrecondition(
                f"the server's detector bundle changed during the run ({bundle_id} -> "
                f"{prov.bundle_id}); run the same command again to score with "
                f"{prov.bundle_id}")
        for (item, image), res in zip(members, result.results, strict=True):
            if res.error is not None:
                out.append((item, image, res.error.code, res.error.message, None))
            elif store and not res.stored:
                out.append((item, image, "UNAVAILABLE", "scored but not stored", None))
            else:
                out.append((item, image, "", "", {
                    "ensemble": res.ensemble, "is_anomaly": res.is_anomaly,
                    "threshold": res.threshold,
                    "detectors": {d.detector: {"raw": d.raw, "adapted": d.adapted,
                                               "calibrated": d.calibrated}
                                  for d in res.detectors},
                    "model_id": prov.model_id, "bundle_id": prov.bundle_id,
                    "space": prov.space, "adaptation": res.adaptation,
                    "score_adaptation": prov.score_adaptation,
                    "camera_weight": res.camera_weight,
                }))
    return out


def _records_of(checkpoint: Checkpoint, event_gap_s: float, bundle_id: str = ""):
    """What the score writers read: the checkpoint's records (each naming the run's
    bundle), grouped into events when asked."""
    if event_gap_s > 0:
        return lambda: group_events(score_records(checkpoint.outcomes(), bundle_id),
                                    event_gap_s)
    return lambda: score_records(checkpoint.outcomes(), bundle_id)


def _megadetector_info(source: Source) -> dict:
    """What the score writers take from the source: its image root, and a MegaDetector
    source's info and category tables."""
    info: dict = {"image_root": str(source.image_root)}
    results = getattr(source, "results", None)
    if isinstance(results, dict):
        info.update({"megadetector_info": results.get("info") or {},
                     "detection_categories": results.get("detection_categories"),
                     "classification_categories": results.get("classification_categories")})
    return info


class _Throttle:
    """Keeps the send rate at or below `rate` images per second (0: unlimited)."""

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self.next_time = time.monotonic()
        self.lock = threading.Lock()

    def wait(self, n: int) -> None:
        if self.rate <= 0:
            return
        with self.lock:
            now = time.monotonic()
            start = max(now, self.next_time)
            self.next_time = start + n / self.rate
        if start > now:
            time.sleep(start - now)
