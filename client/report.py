"""`envad report`: a static review page of a scored archive (no server needed to view it).

Input: the JSON lines a scoring backfill writes (`envad backfill ... --scores-out
scores.jsonl`). Output, in one folder: `index.html` (per camera: a score histogram and the
top-N images by ensemble score (one per event when the scores were grouped into events
with --group-events), each with its thumbnail, score, detector votes and its
nearest stored neighbours as thumbnails), `thumbs/` (the JPEG thumbnails the page shows),
`contact_sheet.png` (the top images of every camera in one picture, captioned with their
file names, for a terminal or a chat) and `shown.csv` (the images shown, for the record).

The page is where review happens: each item has a "false alarm" and a "new content"
toggle, and a button downloads `review.csv` holding only the marked images (id, verdict),
which `envad label --from review.csv` applies (client/review_file.py). Each item links to
its full-size image (a path relative to the page's folder for a local file), and shows its
capture time, event and file name; the files the scores record as failed are listed with
their reasons.

Neighbours come from the server's Search (by the stored id, else by the image's bytes),
from the image's own camera first (then any camera, to fill up), and leave out the image
itself (same id or same file) and known anomalies (rows labelled "anomaly", images the
scores flag), so that they show what normal looks like nearby.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import urllib.parse
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath, PureWindowsPath

from PIL import Image, UnidentifiedImageError

from envad.client.report_html import render_page
from envad.client.report_sheet import write_contact_sheet
from envad.client.sources import read_uri
from envad.errors import EnvadError, InvalidInput, NotFound
from envad.records import ANOMALY_LABEL, RowFilter

THUMB_PX = 192
HISTOGRAM_BINS = 20
SEARCH_SLACK = 8                # extra neighbours asked for, to fill in for the excluded ones


@dataclass(frozen=True)
class ScoredImage:
    """One scored image of the scores file."""

    key: str
    id: str
    env: str
    uri: str
    ensemble: float
    is_anomaly: bool
    threshold: float
    detectors: dict[str, dict[str, float]]
    event: str = ""
    event_size: int = 1
    timestamp: str = ""

    @property
    def file_name(self) -> str:
        return file_name(self.uri or self.key)

    def votes(self) -> int:
        """Detectors whose calibrated score reaches the threshold."""
        return sum(1 for s in self.detectors.values() if s["calibrated"] >= self.threshold)


@dataclass(frozen=True)
class Thumb:
    """An image as the page shows it: its thumbnail file (relative to the report folder,
    "" when the image could not be read) and what to write under it."""

    id: str
    env: str
    uri: str
    path: str
    distance: float | None = None
    label: str = ""
    same_camera: bool = True

    @property
    def file_name(self) -> str:
        return file_name(self.uri)


@dataclass(frozen=True)
class FailedFile:
    """A file the scores record as failed, with the reason the server gave."""

    key: str
    uri: str
    reason: str


@dataclass
class Reviewed:
    """A top image of a camera with its thumbnail and its neighbours."""

    image: ScoredImage
    thumb: Thumb
    neighbours: list[Thumb] = field(default_factory=list)


@dataclass
class CameraSection:
    env: str
    scores: list[float]
    threshold: float
    top: list[Reviewed]

    def histogram(self, bins: int = HISTOGRAM_BINS) -> list[int]:
        """Counts of the camera's ensemble scores in `bins` equal bins over [0, 1]."""
        counts = [0] * bins
        for score in self.scores:
            counts[min(int(score * bins), bins - 1)] += 1
        return counts


@dataclass(frozen=True)
class ReportSummary:
    out_dir: str
    page: str
    contact_sheet: str
    shown_csv: str
    cameras: int
    images: int
    shown: int
    failed: int = 0


def _records(path: Path) -> Iterator[tuple[int, dict]]:
    """(line number, record) of a scores JSON lines file."""
    if path.suffix.lower() not in (".jsonl", ".ndjson"):
        raise InvalidInput(f"{path}: envad report reads the .jsonl scores of "
                           "`envad backfill --scores-out scores.jsonl`")
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise InvalidInput(f"cannot read {path}: {exc.strerror or exc}") from exc
    for number, line in enumerate(lines, start=1):
        if line.strip():
            try:
                record = json.loads(line)
            except ValueError as exc:
                raise InvalidInput(f"{path}:{number}: not a score record ({exc})") from exc
            if not isinstance(record, dict):
                raise InvalidInput(f"{path}:{number}: not a score record (not an object)")
            yield number, record


def read_failures(path: Path) -> list[FailedFile]:
    """The files a scores file records as failed, with their reasons."""
    return [FailedFile(str(r.get("key") or ""), str(r.get("uri") or ""),
                       str(r.get("reason") or r.get("code") or "failed"))
            for _, r in _records(path) if r.get("status") == "failed"]


def read_scores(path: Path) -> list[ScoredImage]:
    """The scored images of a scores JSON lines file (failed and skipped ones left out)."""
    images = []
    for number, record in _records(path):
        if record.get("status") != "ok" or record.get("ensemble") is None:
            continue
        try:
            images.append(ScoredImage(
                key=str(record["key"]), id=str(record.get("id") or ""),
                env=str(record.get("env") or ""), uri=str(record.get("uri") or ""),
                ensemble=float(record["ensemble"]), is_anomaly=bool(record["is_anomaly"]),
                threshold=float(record["threshold"]), detectors=dict(record["detectors"]),
                event=str(record.get("event") or ""),
                event_size=int(record.get("event_size") or 1),
                timestamp=str(record.get("timestamp") or ""),
            ))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise InvalidInput(f"{path}:{number}: not a score record ({exc})") from exc
    if not images:
        raise InvalidInput(f"{path} holds no scored image")
    return images


def build_report(scores_path: Path, out_dir: Path, *, top: int = 10, neighbours: int = 4,
                 client=None) -> ReportSummary:
    """Write the review page, thumbnails, contact sheet and list of shown images into
    `out_dir`.

    `client` (an EnvadClient) is asked for neighbours; None or `neighbours=0` leaves them
    out (the page then shows the scores only).
    """
    if top < 1 or neighbours < 0:
        raise InvalidInput("--top must be >= 1 and --neighbours >= 0")
    images = read_scores(scores_path)
    failures = read_failures(scores_path)
    (out_dir / "thumbs").mkdir(parents=True, exist_ok=True)
    flagged = {i.id for i in images if i.is_anomaly and i.id}
    by_env: dict[str, list[ScoredImage]] = defaultdict(list)
    for image in images:
        by_env[image.env].append(image)
    sections = []
    for env in sorted(by_env):
        ranked = one_per_event(sorted(by_env[env], key=lambda i: i.ensemble,
                                      reverse=True))[:top]
        reviewed = []
        for image in ranked:
            entry = Reviewed(image, thumbnail(out_dir, image.id, image.env, image.uri))
            if client is not None and neighbours:
                entry.neighbours = [
                    thumbnail(out_dir, n.id, n.env, n.uri, n.distance, n.label,
                              same_camera=n.env == image.env)
                    for n in nearest_normals(client, image, neighbours, flagged)]
            reviewed.append(entry)
        sections.append(CameraSection(env, [i.ensemble for i in by_env[env]],
                                      ranked[0].threshold, reviewed))
    page = out_dir / "index.html"
    page.write_text(render_page(sections, scores_path.name, out_dir, failures),
                    encoding="utf-8")
    sheet = write_contact_sheet(out_dir / "contact_sheet.png", out_dir, sections)
    shown_csv = write_shown_list(out_dir / "shown.csv", sections)
    return ReportSummary(str(out_dir), str(page), str(sheet), str(shown_csv), len(sections),
                         len(images), sum(len(s.top) for s in sections), len(failures))


def one_per_event(ranked: list[ScoredImage]) -> list[ScoredImage]:
    """The highest-ranked image of each event (scores grouped with --group-events), so a
    burst is one decision; images without an event stand alone."""
    seen: set[str] = set()
    kept = []
    for image in ranked:
        if image.event and image.event in seen:
            continue
        seen.add(image.event)
        kept.append(image)
    return kept


def nearest_normals(client, image: ScoredImage, k: int, flagged: set[str]) -> list:
    """The k nearest stored rows that are neither the image itself nor known anomalies:
    those of the image's own camera first, then those of any camera to fill up."""
    kept: list = []
    for row_filter in ((RowFilter(envs=(image.env,)),) if image.env else ()) + (None,):
        for n in _search(client, image, k + SEARCH_SLACK, row_filter):
            if len(kept) < k and n.id not in {m.id for m in kept} and n.id != image.id \
                    and not (n.uri and n.uri == image.uri) and n.label != ANOMALY_LABEL \
                    and n.id not in flagged:
                kept.append(n)
        if len(kept) >= k:
            break
    return kept


def _search(client, image: ScoredImage, k: int, row_filter: RowFilter | None) -> list:
    """Search by the stored id, else by the image's bytes ([] when neither works)."""
    try:
        if image.id:
            return list(client.search(id=image.id, k=k, row_filter=row_filter).neighbors)
    except NotFound:
        pass
    try:
        return list(client.search(image=read_uri(image.uri), k=k,
                                  row_filter=row_filter).neighbors)
    except (OSError, EnvadError):
        return []


def thumbnail(out_dir: Path, id: str, env: str, uri: str, distance: float | None = None,
              label: str = "", *, same_camera: bool = True) -> Thumb:
    """A JPEG thumbnail of the image at `uri` under out_dir/thumbs ("" path: unreadable)."""
    name = hashlib.sha256(uri.encode()).hexdigest()[:24] + ".jpg"
    target = out_dir / "thumbs" / name
    if not target.exists():
        try:
            with Image.open(io.BytesIO(read_uri(uri))) as img:
                img.thumbnail((THUMB_PX, THUMB_PX))
                img.convert("RGB").save(target, "JPEG", quality=85)
        except (OSError, ValueError, UnidentifiedImageError, Image.DecompressionBombError):
            return Thumb(id, env, uri, "", distance, label, same_camera)
    return Thumb(id, env, uri, f"thumbs/{name}", distance, label, same_camera)


def file_name(uri: str) -> str:
    """The last part of a path or URL (either separator)."""
    path = urllib.parse.urlparse(uri).path if "://" in uri else uri
    return PureWindowsPath(PurePosixPath(path).name).name or uri


def write_shown_list(path: Path, sections: list[CameraSection]) -> Path:
    """The images the page shows, one row each (the page's review.csv holds the verdicts)."""
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["id", "env", "key", "ensemble", "is_anomaly", "votes", "uri"])
        for section in sections:
            for entry in section.top:
                image = entry.image
                writer.writerow([image.id, image.env, image.key, f"{image.ensemble:.4f}",
                                 "true" if image.is_anomaly else "false",
                                 f"{image.votes()}/{len(image.detectors)}", image.uri])
    return path
