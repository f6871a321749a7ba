"""What a backfill reports: the run summary, and the score records built from the
checkpoint's outcomes (shared by the service and the Ray engines)."""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from envad.client.checkpoint import Outcome

MAX_EXAMPLES = 5     # failed files named in all (failed_examples, kept for scripts)
FILES_PER_REASON = 3  # failed files named under each reason


class FailureGroups:
    """Failures grouped by the class of error (`reason_class`), not by file: a count per
    reason and the first few files of each with their own reason."""

    def __init__(self, per_reason: int = FILES_PER_REASON) -> None:
        self.per_reason = per_reason
        self.counts: Counter = Counter()
        self.files: dict[str, list[tuple[str, str]]] = {}

    def add(self, key: str, code: str, reason: str, names: Iterable[str] = ()) -> None:
        """Count a failure of `key`; `names` are the strings that name its file in the
        reason (its id, uri), left out of the reason's class."""
        group = reason_class(code, reason, (key, *names))
        self.counts[group] += 1
        files = self.files.setdefault(group, [])
        if len(files) < self.per_reason:
            files.append((key, reason))

    def __bool__(self) -> bool:
        return bool(self.counts)

    def as_list(self) -> list[dict]:
        """[{"reason", "count", "files": [{"key", "reason"}]}], most frequent first."""
        return [{"reason": group, "count": n,
                 "files": [{"key": k, "reason": r} for k, r in self.files[group]]}
                for group, n in self.counts.most_common()]

    def lines(self, indent: str = "    ") -> list[str]:
        """Each reason with its count, then its first files and their own reasons."""
        out = []
        for group, n in self.counts.most_common():
            out.append(f"{indent}{n:>6}  {group}")
            out += [f"{indent}      e.g. {key}: {reason}" for key, reason in self.files[group]]
            if n > len(self.files[group]):
                out.append(f"{indent}      ... and {n - len(self.files[group])} more")
        return out


@dataclass
class BackfillSummary:
    """Counts of one run. `already_done` are items a resumed run found in the checkpoint."""

    model_id: str = ""
    engine: str = "service"
    bundle_id: str = ""   # a scoring run's detector bundle ("" when ingesting)
    run: str = "new"      # "new", "resumed" (an interrupted run) or "rerun" (a finished one)
    new_items: int = 0    # items the checkpoint had no outcome for before this run
    ok: int = 0
    inserted: int = 0
    duplicates: int = 0
    already_done: int = 0
    skipped: Counter = field(default_factory=Counter)
    failures: FailureGroups = field(default_factory=FailureGroups)
    failed_examples: list[tuple[str, str]] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)
    elapsed_s: float = 0.0
    scores_out: str = ""
    scores_written: int = 0
    interrupted: bool = False

    @property
    def failed_reasons(self) -> Counter:
        """Failures per reason class (envad.client.backfill_report.reason_class)."""
        return self.failures.counts

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
                self.failures.add(outcome.key, outcome.code, outcome.reason,
                                  (outcome.id, (outcome.item or {}).get("uri", "")))
                if len(self.failed_examples) < MAX_EXAMPLES:
                    self.failed_examples.append((outcome.key, outcome.reason))

    def as_dict(self) -> dict:
        return {
            "engine": self.engine, "model_id": self.model_id,
            "bundle_id": self.bundle_id, "run": self.run, "new_items": self.new_items,
            "ok": self.ok,
            "inserted": self.inserted, "duplicates": self.duplicates,
            "already_done": self.already_done, "skipped": dict(self.skipped),
            "failed": self.failed, "failed_reasons": dict(self.failed_reasons),
            "failed_examples": [list(x) for x in self.failed_examples],
            "failed_groups": self.failures.as_list(),
            "elapsed_s": round(self.elapsed_s, 3), "scores_out": self.scores_out,
            "scores_written": self.scores_written, "interrupted": self.interrupted,
        }

    def scoring_run(self) -> str:
        """What a scoring run did: scored afresh, resumed, or took up a finished run."""
        bundle = self.bundle_id
        if self.run == "resumed":
            return (f"resumed the interrupted run of bundle {bundle}: {self.already_done} "
                    f"images scored before, {self.ok} now")
        if self.run == "rerun":
            if self.new_items:
                return (f"{self.new_items} new images since the last run, scored with "
                        f"bundle {bundle} ({self.already_done} scored before)")
            return (f"no new images since the last run: the {self.already_done} scores of "
                    f"bundle {bundle} written again")
        return f"scored {self.ok} images with bundle {bundle}"

    def format(self) -> str:
        """A short human-readable report."""
        rate = self.processed / self.elapsed_s if self.elapsed_s > 0 else 0.0
        lines = [
            f"backfill ({self.engine}) into model {self.model_id}: {self.processed} items in "
            f"{self.elapsed_s:.1f}s ({rate:.1f}/s)",
            *([f"  {self.scoring_run()}"] if self.bundle_id else []),
            f"  ingested     {self.ok}"
            + (f"  (new rows {self.inserted}, already stored {self.duplicates})"
               if self.inserted or self.duplicates else ""),
            f"  resumed      {self.already_done} already done in the checkpoint",
            f"  skipped      {sum(self.skipped.values())}",
        ]
        lines += [f"    {n:>6}  {reason}" for reason, n in self.skipped.most_common()]
        lines.append(f"  failed       {self.failed}")
        lines += self.failures.lines()
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


#: the server's prefix naming the image of a per-item error ("image <id or uri>: ...")
_IMAGE_PREFIX = re.compile(r"^image \S+?: ")
#: what the client and the retries put before a server's message
_CLIENT_PREFIX = re.compile(r"^(gave up after retries: )?((Score|ScoreStream|Ingest|Embed): )?")
_QUOTED = re.compile(r"b?'[^']*'|b?\"[^\"]*\"")
_PARENTHESISED = re.compile(r"\s*\([^()]*\)")
_NUMBER = re.compile(r"\d+")


def reason_class(code: str, reason: str, names: Iterable[str] = ()) -> str:
    """The class of an error, for grouping failures: its status code and its message
    without what names the file (`names`: its key, id, uri; the server's "image <id>: "
    prefix), quoted values, parenthesised details and numbers, so that 40 corrupt files
    are one group, not 40."""
    text = reason or ""
    text = _CLIENT_PREFIX.sub("", text, count=1)
    text = _IMAGE_PREFIX.sub("", text, count=1)
    for name in sorted({n for n in names if n}, key=len, reverse=True):
        text = text.replace(name, "")
    text = _QUOTED.sub("", text)
    text = _PARENTHESISED.sub("", text)
    text = _NUMBER.sub("N", text)
    text = re.sub(r"\s+", " ", text)
    text = re.sub(r"\s+([:;,.])", r"\1", text)
    text = re.sub(r"[:;,\s]+$", "", text).strip()
    return f"{code or 'ERROR'}: {text}"[:120].rstrip(": ")


def archive_event(item: dict) -> str:
    """The event the archive names for a checkpointed item ("" when it names none)."""
    return str(item.get("event") or "")


def score_records(outcomes: Iterable[Outcome], bundle_id: str = "") -> Iterator[dict]:
    """Checkpoint outcomes as the records the score writers take (envad.client.writers);
    `bundle_id`: the run's bundle, named by the records of items not scored (failed,
    skipped) too."""
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
            "bundle_id": score.get("bundle_id") or bundle_id,
            "space": score.get("space", ""),
            "adaptation": score.get("adaptation", ""),
            "score_adaptation": score.get("score_adaptation", ""),
            "camera_weight": score.get("camera_weight"),
            "source": item.get("source", {}),
        }
