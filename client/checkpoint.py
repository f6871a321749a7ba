"""The backfill checkpoint: an append-only JSON-lines journal, fsync'd per batch.

Line 1 is a header identifying the job (source, server, model); every further line is
the outcome of one item: `{"k": key, "id": id, "s": status, ...}` with status "ok"
(durable on the server: inserted or already there), "failed" (with code and reason), or
"skipped" (with reason). Scores, when the job asks for them, ride along in "score".

Crash safety: a batch's lines are written, flushed and fsync'd before the batch counts
as done, and the file is only ever appended to, so a crash loses at most the batch in
flight (re-sent on resume; the server's Ingest is idempotent by id). A torn last line
from a crash mid-write is dropped and truncated on open. An exclusive lock stops two
jobs from writing one checkpoint.

On resume, "ok" and "skipped" items are not sent again; "failed" ones are retried. The
last line for a key wins.

A run that went through its whole source appends `{"complete": true}`; outcomes after it
belong to a later run of the same job. A journal whose last run is complete can be taken
up again without --resume when the job allows it (`rerun`: a scoring job, to score new
images and render its outputs again); an interrupted one needs --resume.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from envad.errors import InvalidInput

#: 2: every job header names engine, mode and bundle_id
FORMAT_VERSION = 2
DONE_STATUSES = frozenset({"ok", "skipped"})
STATUSES = frozenset({"ok", "failed", "skipped"})


class CheckpointMismatch(InvalidInput):
    """The checkpoint belongs to another job (other source, server table or options)."""


@dataclass
class Outcome:
    """What happened to one item; one checkpoint line."""

    key: str
    status: str
    id: str = ""
    code: str = ""
    reason: str = ""
    score: dict | None = None
    item: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        line: dict = {"k": self.key, "s": self.status, "id": self.id}
        if self.code:
            line["code"] = self.code
        if self.reason:
            line["r"] = self.reason
        if self.score is not None:
            line["score"] = self.score
        if self.item:
            line["item"] = self.item
        return line

    @classmethod
    def from_json(cls, line: dict) -> Outcome:
        return cls(
            key=line["k"], status=line["s"], id=line.get("id", ""), code=line.get("code", ""),
            reason=line.get("r", ""), score=line.get("score"), item=line.get("item", {}),
        )


class Checkpoint:
    """An open checkpoint journal (use as a context manager; holds an exclusive lock)."""

    def __init__(self, path: str | Path, header: dict, *, resume: bool,
                 rerun: bool = False) -> None:
        """Open `path` for the job described by `header`.

        resume=False refuses a journal that already holds outcomes (so finished work is
        never thrown away by accident), unless `rerun` and the journal is of the same job
        and its last run completed; resume=True requires the same header.
        `opened_as` says which: "new", "resumed" (an unfinished run) or "rerun".
        """
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "a+b")
        try:
            fcntl.flock(self._file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._file.close()
            raise InvalidInput(f"checkpoint {self.path} is in use by another job") from None
        try:
            # key -> (line number, status) of the key's latest outcome: small enough for
            # millions of keys; the outcomes themselves are streamed back from the file.
            self._latest: dict[str, tuple[int, str]] = {}
            self._lines = 0
            self.complete = False
            existing_header = self._load()
            expected = json.loads(json.dumps({**header, "version": FORMAT_VERSION}))
            self.opened_as = "new"
            if existing_header is None:
                self._append([{"header": {**header, "version": FORMAT_VERSION}}])
                self._lines = 1
            elif existing_header != expected and (resume or rerun or not self._latest):
                raise self._mismatch(existing_header, expected)
            elif not self._latest:
                pass
            elif rerun and self.complete:
                self.opened_as = "rerun"
            elif not resume:
                unfinished = " of an unfinished run" if rerun else ""
                raise InvalidInput(
                    f"checkpoint {self.path} holds {self.count('ok')} finished items"
                    f"{unfinished}: pass --resume to continue that job, or remove the file "
                    "to start over"
                )
            else:
                self.opened_as = "rerun" if self.complete else "resumed"
        except BaseException:
            self.close()
            raise

    def _mismatch(self, existing: dict, expected: dict) -> CheckpointMismatch:
        if existing.get("version") != FORMAT_VERSION:
            return CheckpointMismatch(
                f"checkpoint {self.path} has an unknown older format (version "
                f"{existing.get('version')!r}, this envad writes {FORMAT_VERSION}): rerun "
                "the backfill without --resume after removing the file, or with another "
                "--checkpoint (items already stored are not stored twice)")
        diff = sorted(k for k in expected.keys() | existing.keys()
                      if expected.get(k) != existing.get(k))
        if diff == ["bundle_id"]:
            return CheckpointMismatch(
                f"checkpoint {self.path} holds scores of detector bundle "
                f"{existing.get('bundle_id') or '(unnamed)'}, the server's bundle is now "
                f"{expected.get('bundle_id')} (a checkpoint holds the run of one bundle; "
                "--resume continues a run of the same bundle): run without --checkpoint, "
                "or with a new file, to score with the new bundle")
        return CheckpointMismatch(
            f"checkpoint {self.path} belongs to another job (differs in {diff})")

    def _load(self) -> dict | None:
        """Read the journal; cut off a torn last line; return the header (None if empty)."""
        self._file.seek(0)
        header = None
        offset = 0
        for raw in self._file:
            if not raw.endswith(b"\n"):  # torn write from a crash: cut it off
                self._file.truncate(offset)
                self._file.flush()
                os.fsync(self._file.fileno())
                break
            offset += len(raw)
            number, line = next(self._parse([raw], start=self._lines + 1))
            self._lines = number
            if number == 1:
                if "header" not in line:
                    raise InvalidInput(f"checkpoint {self.path} has no header line")
                header = line["header"]
            elif "k" not in line:      # a run marker
                self.complete = bool(line.get("complete"))
            else:
                self._apply(number, line["k"], line["s"])
                self.complete = False
        return header

    def _parse(self, raw_lines: Iterable[bytes], start: int = 1) -> Iterator[tuple[int, dict]]:
        for number, raw in enumerate(raw_lines, start=start):
            try:
                yield number, json.loads(raw)
            except ValueError as exc:
                raise InvalidInput(f"checkpoint {self.path}:{number} is corrupt: {exc}") from exc

    def _apply(self, number: int, key: str, status: str) -> None:
        if status not in STATUSES:
            raise InvalidInput(f"checkpoint {self.path}:{number}: unknown status {status!r}")
        self._latest[key] = (number, status)

    def _append(self, lines: Iterable[dict]) -> None:
        payload = b"".join(
            json.dumps(line, separators=(",", ":"), default=str).encode() + b"\n"
            for line in lines
        )
        self._file.seek(0, os.SEEK_END)
        self._file.write(payload)
        self._file.flush()
        os.fsync(self._file.fileno())

    def record(self, outcomes: Iterable[Outcome]) -> None:
        """Durably append a batch of outcomes (one write, one fsync)."""
        outcomes = list(outcomes)
        if not outcomes:
            return
        self._append(o.to_json() for o in outcomes)
        for outcome in outcomes:
            self._lines += 1
            self._apply(self._lines, outcome.key, outcome.status)
        self.complete = False

    def mark_complete(self) -> None:
        """Record that the run went through its whole source (durably)."""
        if self.complete:
            return
        self._append([{"complete": True}])
        self._lines += 1
        self.complete = True

    def seen(self, key: str) -> bool:
        """True when the journal holds an outcome of the key (of any status)."""
        return key in self._latest

    def is_done(self, key: str) -> bool:
        """True when the key's latest outcome is "ok" or "skipped"."""
        latest = self._latest.get(key)
        return latest is not None and latest[1] in DONE_STATUSES

    def count(self, status: str) -> int:
        return sum(1 for _, s in self._latest.values() if s == status)

    def outcomes(self) -> Iterator[Outcome]:
        """The latest outcome of every key, in journal order, streamed from the file."""
        self._file.flush()
        with open(self.path, "rb") as f:
            for number, line in self._parse(f):
                if number > 1 and "k" in line and \
                        self._latest.get(line["k"], (0,))[0] == number:
                    yield Outcome.from_json(line)

    def close(self) -> None:
        if not self._file.closed:
            fcntl.flock(self._file.fileno(), fcntl.LOCK_UN)
            self._file.close()

    def __enter__(self) -> Checkpoint:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
