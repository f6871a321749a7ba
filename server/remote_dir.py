"""Files under a URI on object storage, read and written whole through pyarrow's file
systems, configured from the same storage options LanceDB takes (storage_uri.py)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path

from pyarrow import fs as pafs

from envad.errors import FailedPrecondition, InvalidInput
from envad.server.storage_uri import URI_PATTERN, join, redact

#: bytes read or written at a time by `upload` and `download`
_STREAM_CHUNK = 16 << 20
#: LanceDB's S3 option keys -> pyarrow S3FileSystem arguments
_S3_ARGUMENTS = {
    "aws_endpoint": "endpoint_override", "endpoint": "endpoint_override",
    "aws_endpoint_url": "endpoint_override", "endpoint_url": "endpoint_override",
    "aws_region": "region", "region": "region", "aws_default_region": "region",
    "aws_access_key_id": "access_key", "access_key_id": "access_key",
    "aws_secret_access_key": "secret_key", "secret_access_key": "secret_key",
    "aws_session_token": "session_token", "session_token": "session_token",
    "aws_token": "session_token", "token": "session_token",
}


def _filesystem(uri: str, options: Mapping[str, str]) -> tuple[pafs.FileSystem, str]:
    """A pyarrow file system for `uri` configured from LanceDB-style storage options,
    and the path of `uri` inside it."""
    match = URI_PATTERN.match(uri)
    if match is None:
        raise InvalidInput(f"not a storage URI: {uri}")
    scheme, rest = match["scheme"], match["rest"].rstrip("/")
    if scheme in ("s3", "s3a"):
        kwargs: dict[str, object] = {}
        for key, value in options.items():
            if key in _S3_ARGUMENTS:
                kwargs[_S3_ARGUMENTS[key]] = value
        if options.get("allow_http", "").lower() in ("true", "1", "yes"):
            kwargs["scheme"] = "http"
        endpoint = str(kwargs.get("endpoint_override", ""))
        if endpoint.startswith("http://"):
            kwargs["scheme"], kwargs["endpoint_override"] = "http", endpoint[len("http://"):]
        elif endpoint.startswith("https://"):
            kwargs["endpoint_override"] = endpoint[len("https://"):]
        # a write is then one PutObject, not a multipart upload's three requests (its
        # failure shows when the stream closes, inside the same `try` as the writing)
        return pafs.S3FileSystem(allow_delayed_open=True, **kwargs), rest
    try:
        filesystem, path = pafs.FileSystem.from_uri(uri)
    except (ValueError, OSError) as exc:     # pyarrow's ArrowInvalid is a ValueError
        raise InvalidInput(f"cannot open {uri} for the server's files: {exc}") from exc
    return filesystem, path


class RemoteDir:
    """A folder on object storage: whole-object reads and writes (each write replaces an
    object at once), and copies to and from a local cache folder."""

    def __init__(self, uri: str, options: Mapping[str, str]):
        self.uri = uri.rstrip("/")
        self.options = dict(options)
        self._fs, self._root = _filesystem(self.uri, self.options)

    def child(self, *parts: str) -> RemoteDir:
        sub = RemoteDir.__new__(RemoteDir)
        sub.uri, sub.options = join(self.uri, *parts), self.options
        sub._fs, sub._root = self._fs, "/".join([self._root, *parts])
        return sub

    def _path(self, relative: str) -> str:
        return "/".join([self._root, relative.strip("/")]) if relative else self._root

    def _failed(self, doing: str, exc: Exception) -> FailedPrecondition:
        return FailedPrecondition(redact(f"cannot {doing} {self.uri}: {exc}", self.options))

    def read_bytes(self, relative: str) -> bytes | None:
        """The object's bytes, or None when there is none."""
        try:
            with self._fs.open_input_stream(self._path(relative)) as stream:
                return stream.read()
        except OSError as exc:      # FileNotFoundError included
            if _missing(exc):
                return None
            raise self._failed(f"read {relative} in", exc) from exc

    def write_bytes(self, relative: str, data: bytes) -> None:
        try:
            with self._fs.open_output_stream(self._path(relative)) as stream:
                stream.write(data)
        except OSError as exc:
            raise self._failed(f"write {relative} in", exc) from exc

    def delete(self, relative: str) -> None:
        """Remove one object (none there is fine)."""
        try:
            self._fs.delete_file(self._path(relative))
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise self._failed(f"delete {relative} in", exc) from exc

    def check(self) -> None:
        """Raise FailedPrecondition, in one line saying what to check, when the URI
        cannot be listed: a bucket that does not exist, an endpoint that does not
        answer, credentials the store refuses."""
        bucket = self._root.split("/", 1)[0]
        try:
            found = self._fs.get_file_info(bucket).type != pafs.FileType.NotFound
            if found:
                self._fs.get_file_info(
                    pafs.FileSelector(self._root, recursive=False, allow_not_found=True))
        except OSError as exc:
            cause = " ".join(str(exc).split())
            raise FailedPrecondition(redact(
                f"cannot reach {self.uri}: {cause} -- {_advice(cause, self.options)}",
                self.options)) from exc
        if not found:
            raise FailedPrecondition(
                f"cannot reach {self.uri}: the bucket {bucket!r} does not exist -- check "
                "the bucket's name and region, or create it")

    def listing(self, relative: str = "") -> dict[str, tuple[int, int]]:
        """Every object below `relative` (paths relative to it): its size in bytes and
        its modification time in nanoseconds (0 where the store gives none)."""
        base = self._path(relative)
        try:
            found = self._fs.get_file_info(
                pafs.FileSelector(base, recursive=True, allow_not_found=True))
        except OSError as exc:
            raise self._failed("list", exc) from exc
        return {info.path[len(base) + 1:]: (info.size, info.mtime_ns or 0) for info in found
                if info.type == pafs.FileType.File}

    def sizes(self, relative: str = "") -> dict[str, int]:
        """Every object below `relative` (paths relative to it) and its size in bytes."""
        return {name: size for name, (size, _) in self.listing(relative).items()}

    def files(self, relative: str = "") -> list[str]:
        """Every object below `relative`, as paths relative to it (sorted)."""
        return sorted(self.listing(relative))

    def mirror(self, suffix: str, local_dir: Path) -> list[str]:
        """Download the objects at the top of this folder whose names end in `suffix`
        into `local_dir` when the copy there is missing, of another size, or older than
        the object (a file replaced under its name by one of the same size); each copy
        is replaced atomically and takes the object's time. Returns the names
        downloaded."""
        pulled = []
        for name, (size, mtime_ns) in sorted(self.listing().items()):
            if "/" in name or not name.endswith(suffix):
                continue
            local = Path(local_dir) / name
            held = local.stat() if local.is_file() else None
            if (held is None or held.st_size != size
                    or (mtime_ns and held.st_mtime_ns < mtime_ns)):
                if self.pull_file(name, local):
                    if mtime_ns:
                        os.utime(local, ns=(mtime_ns, mtime_ns))
                    pulled.append(name)
        return pulled

    def push_file(self, local: Path, relative: str) -> None:
        self.write_bytes(relative, Path(local).read_bytes())

    def upload(self, local: Path, relative: str) -> None:
        """`push_file` for large files: streamed in chunks, never whole in memory."""
        try:
            with open(local, "rb") as source, \
                    self._fs.open_output_stream(self._path(relative)) as stream:
                while chunk := source.read(_STREAM_CHUNK):
                    stream.write(chunk)
        except OSError as exc:
            raise self._failed(f"write {relative} in", exc) from exc

    def download(self, relative: str, local: Path) -> bool:
        """`pull_file` for large files, streamed in chunks into a temporary file that
        replaces `local` once whole; False when there is no such object."""
        local = Path(local)
        local.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=local.parent, prefix=".pull-")
        try:
            with os.fdopen(fd, "wb") as target, \
                    self._fs.open_input_stream(self._path(relative)) as stream:
                while chunk := stream.read(_STREAM_CHUNK):
                    target.write(chunk)
            os.replace(tmp, local)
            return True
        except OSError as exc:      # FileNotFoundError included
            if _missing(exc):
                return False
            raise self._failed(f"read {relative} in", exc) from exc
        finally:
            Path(tmp).unlink(missing_ok=True)

    def pull_file(self, relative: str, local: Path) -> bool:
        """Copy one object into `local` (replaced atomically); False when there is none."""
        data = self.read_bytes(relative)
        if data is None:
            return False
        _write_atomic(Path(local), data)
        return True

    def push_tree(self, local_dir: Path, relative: str, *, last: Iterable[str] = ()) -> None:
        """Upload every file of `local_dir` under `relative`; the names in `last` after
        the others (a reader that sees a manifest finds the files it lists)."""
        later = set(last)
        names = sorted(p.relative_to(local_dir).as_posix() for p in Path(local_dir).rglob("*")
                       if p.is_file())
        for name in [n for n in names if n not in later] + [n for n in names if n in later]:
            self.push_file(Path(local_dir) / name, f"{relative}/{name}")

    def pull_tree(self, relative: str, local_dir: Path) -> bool:
        """Copy every object below `relative` into `local_dir` (written in a staging
        folder, then renamed into place); False when there is none."""
        names = self.files(relative)
        if not names:
            return False
        local_dir = Path(local_dir)
        local_dir.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".pull-", dir=local_dir.parent))
        try:
            for name in names:
                data = self.read_bytes(f"{relative}/{name}")
                if data is None:
                    raise self._failed(f"read {relative}/{name} in", FileNotFoundError(name))
                target = staging / name
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data)
            if not local_dir.exists():
                os.rename(staging, local_dir)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return True


def _missing(exc: OSError) -> bool:
    """Whether a read failed because the object is not there (a local file system says
    FileNotFoundError, S3 an OSError naming NoSuchKey or "not found")."""
    return (isinstance(exc, FileNotFoundError) or "not found" in str(exc).lower()
            or "NoSuchKey" in str(exc))


def _advice(cause: str, options: Mapping[str, str]) -> str:
    """What to check, from the store's error text."""
    text = cause.lower()
    if any(word in text for word in ("access_denied", "accessdenied", "invalidaccesskeyid",
                                     "signaturedoesnotmatch", "forbidden", "credential",
                                     "403")):
        return ("check the credentials: the aws_access_key_id / aws_secret_access_key "
                "storage options or the AWS_* environment variables")
    if any(word in text for word in ("network_connection", "connect", "curlcode",
                                     "timed out", "timeout", "resolve")):
        endpoint = next((options[k] for k in _S3_ARGUMENTS
                         if _S3_ARGUMENTS[k] == "endpoint_override" and k in options),
                        "the default endpoint")
        return f"check that {endpoint} is the store's endpoint and that it answers"
    return "check the URI, the endpoint and the credentials"


def _write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".pull-")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
