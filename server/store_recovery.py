"""A store table whose newest files are damaged, and the record of acknowledged writes.

Opening (`open_newest_readable`): the table's newest version is checked before it is
served: its manifest must read, and every data and deletion file it lists must exist
with the size its manifest recorded (a truncated or deleted file is found here, at
start, not by the first read that touches it). A damaged version is passed over for
the newest older version that checks out (lance keeps the older manifests until the
store's compaction cleans them up); a manifest that does not read is renamed
`<name>.manifest.damaged` (lance cannot open the table while it is the newest one), all
other files are left as they are. One ERROR names the damaged file and the version
served, and `Recovery.problem` says it to clients (GetInfo's hint).

The acknowledged record (`<data_dir>/lancedb.acknowledged/<table>.json`: the table
version of the last acknowledged commit and the table's rows then) is written after
each commit, atomically and fsync'd, before the callers hear of their rows. It lives
outside the table's manifests so that a lost manifest cannot take it along. When the
readable version is below it (an acknowledged commit is missing, or rows are), the
table is served read-only at that version, pinned: reads answer, writes are refused
(`Recovery.writable` is False) with a message saying what is missing and the two ways
out: restore the lancedb folder from a backup, or accept the loss by deleting the
record file (the next start then serves the readable version as the newest one and
writes follow it). When nothing acknowledged is missing, the readable version is
restored as the newest version at once (lance's restore: a new version with its data),
so that writes follow it.

On object storage (`open_below_record`), the record is the object
`<uri>/lancedb.acknowledged/<table>.json`, replaced by one PUT of the whole JSON (a
reader sees the old record or the new one, never a part), and the same rule applies at
start to the version lance opens as the newest; the damaged-file checks above read local
files and are not made there.
"""

from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import lance

from envad.errors import FailedPrecondition
from envad.server.durable import fsync_path

if TYPE_CHECKING:
    from envad.server.remote_dir import RemoteDir

log = logging.getLogger(__name__)
DAMAGED_SUFFIX = ".damaged"
_U64_MAX = (1 << 64) - 1
_MANIFEST = re.compile(r"^(\d+)\.manifest$")


@dataclass(frozen=True)
class Acknowledged:
    """The last acknowledged commit: its table version and the table's rows then."""

    version: int
    rows: int


def record_path(db_dir: Path, table: str) -> Path:
    """Where the acknowledged record of `table` in the LanceDB folder `db_dir` lives: a
    folder beside it (a restore of the lancedb folder from a backup leaves it)."""
    db_dir = Path(db_dir)
    return db_dir.with_name(db_dir.name + ".acknowledged") / f"{table}.json"


def read_record(path: Path) -> Acknowledged | None:
    """The record at `path`; None when there is none (or it does not read: logged)."""
    try:
        data = json.loads(path.read_text())
        return Acknowledged(int(data["version"]), int(data["rows"]))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.error("acknowledged record %s does not read (%s): taken as absent", path, exc)
        return None


def write_record(path: Path, acknowledged: Acknowledged) -> None:
    """Replace the record atomically: temp file, fsync, rename, fsync of the folder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_suffix(".tmp")
    with open(staging, "w") as out:
        json.dump({"version": acknowledged.version, "rows": acknowledged.rows}, out)
        out.flush()
        os.fsync(out.fileno())
    staging.replace(path)
    fsync_path(path.parent)


def _parsed(text: str | bytes, where: str) -> Acknowledged | None:
    try:
        data = json.loads(text)
        return Acknowledged(int(data["version"]), int(data["rows"]))
    except (ValueError, KeyError, TypeError) as exc:
        log.error("acknowledged record %s does not read (%s): taken as absent", where, exc)
        return None


class LocalRecord:
    """The acknowledged record of a table in a local LanceDB folder (`record_path`)."""

    def __init__(self, path: Path):
        self.path = Path(path)

    def read(self) -> Acknowledged | None:
        return read_record(self.path)

    def write(self, acknowledged: Acknowledged) -> None:
        write_record(self.path, acknowledged)

    def exists(self) -> bool:
        return self.path.is_file()


class RemoteRecord:
    """The acknowledged record of a table in a LanceDB folder on object storage: the
    object `lancedb.acknowledged/<table>.json` beside it, written in one PUT."""

    def __init__(self, data_dir: RemoteDir, table: str):
        self.relative = f"lancedb.acknowledged/{table}.json"
        self.uri = f"{data_dir.uri}/{self.relative}"
        self._dir = data_dir

    def read(self) -> Acknowledged | None:
        """The record; None when there is none (or it does not read: logged). An
        unreachable store is a FailedPrecondition."""
        data = self._dir.read_bytes(self.relative)
        return None if data is None else _parsed(data, self.uri)

    def write(self, acknowledged: Acknowledged) -> None:
        body = json.dumps({"version": acknowledged.version, "rows": acknowledged.rows})
        self._dir.write_bytes(self.relative, body.encode())

    def exists(self) -> bool:
        return self._dir.read_bytes(self.relative) is not None


@dataclass(frozen=True)
class Recovery:
    """How a table whose newest files were damaged, or that opened below its acknowledged
    record, is served."""

    table: str
    served_version: int
    served_rows: int
    damaged: tuple[str, ...] = ()        # files, relative to the data directory
    damaged_version: int | None = None   # the newest version, not served
    missing: Acknowledged | None = None  # the acknowledged commit not served
    record: str = ""                     # the record: relative to a local data dir, or a URI
    restored_as: int | None = None       # the new version holding the served data

    @property
    def writable(self) -> bool:
        return self.missing is None

    @property
    def problem(self) -> str:
        """One sentence for clients (GetInfo's hint, the refusal of a write)."""
        damage = ""
        if self.damaged:
            damage = (f"{', '.join(self.damaged)} is damaged (table version "
                      f"{self.damaged_version} unreadable); ")
        if self.missing is None:
            restored = (" as the newest version" if self.restored_as == self.served_version
                        else f", restored as version {self.restored_as}")
            return (f"store table {self.table}: {damage}serving version "
                    f"{self.served_version} ({self.served_rows} rows){restored}; no "
                    "acknowledged row is missing")
        lost = self.missing.rows - self.served_rows
        not_served = (f"{lost} acknowledged rows are not served" if lost > 0 else
                      "its acknowledged changes (labels) are not served")
        return (f"store table {self.table}: {damage}serving version {self.served_version} "
                f"({self.served_rows} rows) read-only: acknowledged version "
                f"{self.missing.version} ({self.missing.rows} rows) is missing, "
                f"{not_served}. Writes are refused: "
                f"restore the data directory's lancedb folder from a backup holding "
                f"version {self.missing.version} and restart, or accept the loss: delete "
                f"{self.record} and restart (writes then follow version "
                f"{self.served_version})")


def open_newest_readable(db, db_dir: Path, name: str):
    """`db.open_table(name)` at its newest readable version: (table, Recovery or None).

    ValueError when the table does not exist (as `open_table`); FailedPrecondition when
    no version of it reads (each damaged file named)."""
    db_dir = Path(db_dir)
    uri = db_dir / f"{name}.lance"
    relative = _relative_to(db_dir.parent)
    damaged: list[str] = []
    table, damaged_version = _open_setting_aside(db, name, uri, damaged, relative)
    head = int(table.version)
    served = head
    checked: dict[str, bool] = {}
    versions = sorted((int(v["version"]) for v in table.list_versions()), reverse=True)
    for version in versions:
        bad = _damaged_files(uri, version, checked)
        if not bad:
            served = version
            break
        if damaged_version is None:
            damaged_version = version
        damaged.extend(relative(p) for p in bad if relative(p) not in damaged)
    else:
        raise FailedPrecondition(
            f"store table {name}: no version reads ({', '.join(damaged)} damaged): "
            "restore the data directory's lancedb folder from a backup")
    if served != head:
        table.checkout(served)
    rows = int(table.count_rows())
    record = record_path(db_dir, name)
    acknowledged = read_record(record)
    missing = (acknowledged if acknowledged is not None
               and (served < acknowledged.version or rows < acknowledged.rows) else None)
    if not damaged and missing is None:
        return table, None
    restored_as = None
    if missing is None:
        if served != head:
            table.restore(served)       # the readable version becomes the newest one
        restored_as = int(table.version)
    recovery = Recovery(name, served, rows, tuple(damaged), damaged_version, missing,
                        relative(record), restored_as)
    log.error("%s (%s)", recovery.problem, _what_was_lost(db_dir, uri, damaged, missing))
    return table, recovery


def open_below_record(db, name: str, record: RemoteRecord):
    """`db.open_table(name)` on object storage: (table, Recovery or None). The version
    lance opens as the newest is checked against the record only (no file checks):
    below it, the table is served read-only as `open_newest_readable` serves it.

    ValueError when the table does not exist (as `open_table`)."""
    table = db.open_table(name)
    served = int(table.version)
    rows = int(table.count_rows())
    acknowledged = record.read()
    if acknowledged is None or (served >= acknowledged.version
                                and rows >= acknowledged.rows):
        return table, None
    recovery = Recovery(name, served, rows, missing=acknowledged, record=record.uri)
    log.error("%s (the newest version lance lists is %d)", recovery.problem, served)
    return table, recovery


def _open_setting_aside(db, name: str, uri: Path, damaged: list[str], relative
                        ) -> tuple[Any, int | None]:
    """`db.open_table(name)`, renaming newest manifests that do not read out of lance's
    way (each added to `damaged`) until one does: (table, the first damaged version)."""
    damaged_version: int | None = None
    while True:
        try:
            return db.open_table(name), damaged_version
        except ValueError:
            raise
        except BaseException as exc:   # lance: the newest manifest does not read
            manifest = _unreadable_newest_manifest(uri) if _failed(exc) else None
            if manifest is None:
                raise
            path, version = manifest
            log.debug("manifest %s does not read: %s", path, exc)
            damaged.append(relative(path))
            damaged_version = version if damaged_version is None else damaged_version
            target = path.with_name(path.name + DAMAGED_SUFFIX)
            while target.exists():
                target = target.with_name(target.name + "~")
            path.rename(target)    # kept, out of lance's way: the previous one is newest
            log.info("store manifest %s does not read (%s): renamed %s", path, exc,
                     target.name)


def _what_was_lost(db_dir: Path, uri: Path, damaged: list[str], missing) -> str:
    """The log's words for the damaged files, or the missing manifest."""
    if damaged:
        return "damaged file: " + ", ".join(str(db_dir.parent / p) for p in damaged)
    assert missing is not None, "a version below the record is what is missing"
    gone = _manifest_path(uri, missing.version)
    set_aside = gone.with_name(gone.name + DAMAGED_SUFFIX)
    return (f"manifest {gone} did not read and was set aside as {set_aside.name}"
            if set_aside.exists() else f"manifest {gone} is missing")


def _failed(exc: BaseException) -> bool:
    """True for an error of lance reading a file: its exceptions, and the panic that
    some damaged files cause in its Rust code (pyo3's PanicException, a BaseException)."""
    return isinstance(exc, Exception) or type(exc).__name__ == "PanicException"


def _relative_to(root: Path):
    def relative(path: Path) -> str:
        try:
            return str(Path(path).relative_to(root))
        except ValueError:
            return str(path)
    return relative


def _manifest_versions(uri: Path) -> list[tuple[int, Path]]:
    """(version, manifest file) of each manifest in the table's _versions folder, newest
    first (lance names them by version, or by u64::MAX - version)."""
    found = []
    try:
        entries = list((uri / "_versions").iterdir())
    except OSError:
        return []
    for path in entries:
        match = _MANIFEST.match(path.name)
        if match:
            number = int(match.group(1))
            found.append((_U64_MAX - number if number > (1 << 63) else number, path))
    return sorted(found, reverse=True)


def _manifest_path(uri: Path, version: int) -> Path:
    """The manifest file that version `version` of the table has (or had)."""
    found = _manifest_versions(uri)
    reversed_names = bool(found) and int(found[0][1].stem) > (1 << 63)
    name = f"{_U64_MAX - version:020d}" if reversed_names else str(version)
    return uri / "_versions" / f"{name}.manifest"


def _unreadable_newest_manifest(uri: Path) -> tuple[Path, int] | None:
    """The newest manifest when lance cannot read it and an older one exists (so that
    setting it aside leaves a table); None otherwise."""
    found = _manifest_versions(uri)
    if len(found) < 2:
        return None
    version, path = found[0]
    try:
        lance.dataset(str(uri), version=version)
    except BaseException as exc:
        if not _failed(exc):
            raise
        return path, version
    return None


def _damaged_files(uri: Path, version: int, checked: dict[str, bool]) -> list[Path]:
    """Files version `version` of the table lists that are missing or not the size its
    manifest recorded (its manifest itself when that does not read)."""
    try:
        dataset = lance.dataset(str(uri), version=version)
        fragments = dataset.get_fragments()
    except BaseException as exc:
        if not _failed(exc):
            raise
        return [_manifest_path(uri, version)]
    bad = []
    for fragment in fragments:
        wanted = [(uri / "data" / f.path, f.file_size_bytes) for f in fragment.data_files()]
        deletion = fragment.deletion_file()      # "_deletions/<file>", relative
        if deletion:
            wanted.append((uri / "_deletions" / Path(str(deletion)).name, None))
        for path, size in wanted:
            key = f"{path}:{size}"
            if key not in checked:
                try:
                    checked[key] = size is None or path.stat().st_size == size
                    checked[key] = checked[key] and path.is_file()
                except OSError:
                    checked[key] = False
            if not checked[key]:
                bad.append(path)
    return bad
