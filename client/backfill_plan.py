"""What a backfill does, whichever engine runs it: its options, the job header a
checkpoint must match to be resumed, and the walk over the source's items.

The service engine (`backfill.py`, through the server's Ingest/Score) and the Ray engine
(`ray_backfill.py`, Lance fragments written directly) differ only in how a batch of
items becomes stored rows. Which items are wanted (environment and split filters),
which are already finished (the checkpoint), where a limited run stops and which items
the source itself says to skip are decided here, once, so that both engines resume and
count a job the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from envad.client.checkpoint import Outcome
from envad.client.retry import RETRYABLE_CODES, RetryPolicy
from envad.client.sources import Source, SourceItem
from envad.errors import InvalidInput

#: status codes after which a backfill sends a batch again (BackfillOptions.batch_retry):
#: the transient ones, and CANCELLED. A backfill never cancels its own calls (on Ctrl-C
#: the batches under way finish and are recorded), so a CANCELLED one was ended by the
#: other side: a server stopping mid-call or a gateway. Ingest is idempotent by id, so
#: the batch is stored once however often it is sent.
BATCH_RETRY_CODES = RETRYABLE_CODES | {"CANCELLED"}


@dataclass(frozen=True)
class BackfillOptions:
    """How a backfill runs.

    batch_size : images per Ingest stream / Score call (service engine).
    concurrency : batches in flight at once (service engine).
    batch_retry : backoff for a batch (or its items) failing with one of its
        `retry_codes`, on top of the client's own per-call retries; covers a server
        restart during the run (BATCH_RETRY_CODES by default).
    envs, splits : only items of these environments / splits (empty: all).
    scores : send through Score(store=...) and keep per-image scores for `scores_out`.
    store : store the images (False with scores: score only, nothing is written).
    rate_limit : at most this many images per second (0: no limit), to spare a server
        that also serves live traffic.
    limit : stop after this many new items (0: all).
    skip_duplicates : do not store an image whose content (sha256) is stored already
        under another id (envad.client.content_index).
    reuse_stored : with scores, score an image stored under its id with the same content
        from its stored embedding instead of embedding it again (Score's reuse_stored).
    """

    batch_size: int = 64
    concurrency: int = 4
    batch_retry: RetryPolicy = RetryPolicy(max_attempts=6, initial_backoff=1.0,
                                           max_backoff=30.0,
                                           retry_codes=BATCH_RETRY_CODES)
    envs: tuple[str, ...] = ()
    splits: tuple[str, ...] = ()
    scores: bool = False
    store: bool = True
    rate_limit: float = 0.0
    limit: int = 0
    skip_duplicates: bool = True
    reuse_stored: bool = False

    def __post_init__(self) -> None:
        if self.batch_size < 1 or self.concurrency < 1:
            raise InvalidInput("batch size and concurrency must be >= 1")
        if not self.store and not self.scores:
            raise InvalidInput("a backfill that neither stores nor scores does nothing")

    def wants(self, item: SourceItem) -> bool:
        """True when the item passes the environment and split filters."""
        return (not self.envs or item.env in self.envs) and (
            not self.splits or item.split in self.splits
        )


def job_header(source: Source, options: BackfillOptions, model_id: str, data_dir: str | Path,
               engine: str = "service", bundle_id: str = "") -> dict:
    """What must match for a checkpoint to be resumed (same archive, table, engine, mode;
    for a scoring job also the detector bundle it scores with, so that scores of two
    bundles never mix in one checkpoint and a refit starts a new job). Every job names
    every key (the Ray engine only ingests; "" when no bundle is scored with)."""
    mode = ("score+store" if options.store else "score") if options.scores else "ingest"
    return {
        "source": source.describe(),
        "model_id": model_id,
        "data_dir": str(data_dir),
        "envs": sorted(options.envs),
        "splits": sorted(options.splits),
        "engine": engine,
        "mode": mode,
        "bundle_id": bundle_id if options.scores else "",
    }


def check_some_wanted(source: Source, options: BackfillOptions) -> None:
    """InvalidInput naming what the source holds when no item passes the filters (or
    the source is empty), so that a run that would do nothing says why instead."""
    envs: set[str] = set()
    splits: set[str] = set()
    for item in source:
        if options.wants(item):
            return
        envs.add(item.env)
        splits.add(item.split)
    if not envs:
        raise InvalidInput(f"{source.path} holds no images")
    raise InvalidInput(
        f"no item of {source.path} matches the filters (--only-env {list(options.envs)}, "
        f"--only-split {list(options.splits)}); it holds environments "
        f"{sorted(envs)[:10]} and splits {sorted(splits)[:10]}")


def count_wanted(source: Source, options: BackfillOptions) -> int:
    """How many of the source's items pass the filters (the progress bar's total)."""
    return sum(1 for item in source if options.wants(item))


@dataclass
class PlannedBatch:
    """The next stretch of the walk.

    items : to send (read, embed, store).
    skipped : outcomes of the items the source says not to process; record as they are.
    already_done : how many items the walk passed over because the checkpoint holds them.
    """

    items: list[SourceItem] = field(default_factory=list)
    skipped: list[Outcome] = field(default_factory=list)
    already_done: int = 0

    def __bool__(self) -> bool:
        return bool(self.items or self.skipped or self.already_done)


def plan_batches(source: Source, options: BackfillOptions, is_done: Callable[[str], bool],
                 size: int) -> Iterator[PlannedBatch]:
    """Walk `source` once: filter, pass over finished keys, stop at `options.limit` new
    items, turn the source's skip reasons into outcomes, and cut batches of at most
    `size` items to send (and at most `size` skipped outcomes).

    `is_done(key)` is the checkpoint's test. A batch may hold only skipped outcomes or
    only an `already_done` count; every yielded batch is non-empty.
    """
    batch = PlannedBatch()
    new = 0
    for item in source:
        if not options.wants(item):
            continue
        if is_done(item.key):
            batch.already_done += 1
            continue
        if options.limit and new >= options.limit:
            break
        new += 1
        if item.skip_reason:
            batch.skipped.append(item_outcome(item, "skipped", reason=item.skip_reason,
                                              keep_item=options.scores))
        else:
            batch.items.append(item)
        if len(batch.items) >= size or len(batch.skipped) >= size:
            yield batch
            batch = PlannedBatch()
    if batch:
        yield batch


def item_outcome(item: SourceItem, status: str, id: str = "", code: str = "",
                 reason: str = "", score: dict | None = None,
                 keep_item: bool = False) -> Outcome:
    """One checkpoint line for `item`; with `keep_item` (score jobs) it also keeps what
    the score outputs need (metadata, the archive's event and the source's extra
    fields)."""
    kept = {}
    if keep_item:
        kept = {"env": item.env, "label": item.label, "split": item.split, "uri": item.uri,
                "timestamp": item.timestamp.isoformat() if item.timestamp else None,
                "event": item.event, "source": dict(item.extra)}
    return Outcome(key=item.key, status=status, id=id or item.id, code=code, reason=reason,
                   score=score, item=kept)
