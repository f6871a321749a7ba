"""What a backfill reports: the run summary, and the score records built from the
checkpoint's outcomes (shared by the service and the Ray engines)."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from envad.client.checkpoint import Outcome

MAX_EXAMPLES = 5


@dataclass
class BackfillSummary:
    """Counts of one run. `already_done` are items a resumed run found in the checkpoint."""

    model_id: str = ""
    engine: str = "service"
    ok: int = 0
    inserted: int = 0
    duplicates: int = 0
    already_done: int = 0
    skipped: Counter = field(default_factory=Counter)
    failed_reasons: Counter = field(default_factory=Counter)
    failed_examples: list[tuple[str, str]] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)
    elapsed_s: float = 0.0
    scores_out: str = ""
    scores_written: int = 0
    interrupted: bool = False

    @property
    def failed(self) -> int:
        return sum(self.failed_reasons.values())

    @property
    def processed(self) -> int:
        return self.ok + self.failed + sum(self.skipped.values())

    def add(self, outcomes: Iterable[Outcome], inserted: int = 0, duplicates: int = 0) -> None:
        self.inserted += inserted
        self.duplicates += duplicates
        for outcome in outcomes:
            if outcome.status == "ok":
                self.ok += 1
            elif outcome.status == "skipped":
                self.skipped[outcome.reason] += 1
            else:
                self.failed_reasons[_reason_class(outcome)] += 1
                if len(self.failed_examples) < MAX_EXAMPLES:
                    self.failed_examples.append((outcome.key, outcome.reason))

    def as_dict(self) -> dict:
        return {
            "engine": self.engine, "model_id": self.model_id, "ok": self.ok,
            "inserted": self.inserted, "duplicates": self.duplicates,
            "already_done": self.already_done, "skipped": dict(self.skipped),
            "failed": self.failed, "failed_reasons": dict(self.failed_reasons),
            "failed_examples": [list(x) for x in self.failed_examples],
            "elapsed_s": round(self.elapsed_s, 3), "scores_out": self.scores_out,
            "scores_written": self.scores_written, "interrupted": self.interrupted,
        }

    def format(self) -> str:
        """A short human-readable report."""
        rate = self.processed / self.elapsed_s if self.elapsed_s > 0 else 0.0
        lines = [
            f"backfill ({self.engine}) into model {self.model_id}: {self.processed} items in "
            f"{self.elapsed_s:.1f}s ({rate:.1f}/s)",
            f"  ingested     {self.ok}"
            + (f"  (new rows {self.inserted}, already stored {self.duplicates})"
               if self.inserted or self.duplicates else ""),
            f"  resumed      {self.already_done} already done in the checkpoint",
            f"  skipped      {sum(self.skipped.values())}",
        ]
        lines += [f"    {n:>6}  {reason}" for reason, n in self.skipped.most_common()]
        lines.append(f"  failed       {self.failed}")
        lines += [f"    {n:>6}  {reason}" for reason, n in self.failed_reasons.most_common()]
        lines += [f"      e.g. {key}: {reason}" for key, reason in self.failed_examples]
        if self.scores_out:
            lines.append(f"  scores       {self.scores_written} records -> {self.scores_out}")
        if self.interrupted:
            lines.append("  INTERRUPTED: finished work is in the checkpoint; run the same "
                         "command with --resume to continue")
        return "\n".join(lines)


class BackfillInterrupted(KeyboardInterrupt):
    """Ctrl-C during a backfill; `.summary` holds what was done (and recorded) so far."""

    def __init__(self, summary: BackfillSummary) -> None:
        super().__init__("backfill interrupted")
        self.summary = summary


def _reason_class(outcome: Outcome) -> str:
    """Group failures by status code and the start of the message (not per file)."""
    first = outcome.reason.split(":", 1)[0] if outcome.reason else ""
    return f"{outcome.code or 'ERROR'}: {first}"[:120]


#: where checkpoints written before items kept their event ("event" in the item) had
#: it: the source values of Camtrap DP (eventID) and COCO Camera Traps (seq_id) items
LEGACY_EVENT_KEYS = ("eventID", "seq_id")


def archive_event(item: dict) -> str:
    """The event the archive names for a checkpointed item ("" when it names none)."""
    if "event" in item:
        return str(item["event"] or "")
    source = item.get("source") or {}
    return next((str(source[k]) for k in LEGACY_EVENT_KEYS if source.get(k)), "")


def score_records(outcomes: Iterable[Outcome]) -> Iterator[dict]:
    """Checkpoint outcomes as the records the score writers take (envad.client.writers)."""
    for outcome in outcomes:
        item = outcome.item or {}
        score = outcome.score or {}
        yield {
            "key": outcome.key,
            "id": outcome.id,
            "env": item.get("env", ""),
            "label": item.get("label", ""),
            "split": item.get("split", ""),
            "uri": item.get("uri", ""),
            "timestamp": item.get("timestamp"),
            "archive_event": archive_event(item),
            "status": outcome.status,
            "code": outcome.code,
            "reason": outcome.reason,
            "ensemble": score.get("ensemble"),
            "is_anomaly": score.get("is_anomaly"),
            "threshold": score.get("threshold"),
            "detectors": score.get("detectors"),
            "model_id": score.get("model_id", ""),
            "bundle_id": score.get("bundle_id", ""),
            "space": score.get("space", ""),
            "adaptation": score.get("adaptation", ""),
            "score_adaptation": score.get("score_adaptation", ""),
            "camera_weight": score.get("camera_weight"),
            "source": item.get("source", {}),
        }
