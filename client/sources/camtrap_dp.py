"""A Camera Trap Data Package (Camtrap DP 1.x): deployments.csv + media.csv, and
observations.csv when present.

- key and id: `deploymentID/mediaID` (stable across re-imports of the package);
- environment: the deployment's `locationID` (falling back to `locationName`, then the
  deploymentID) with `env_by="location"`, or the `deploymentID` with `env_by="deployment"`;
- label: the scientific names observed on the image (media-level observations, or
  event-level ones whose eventStart..eventEnd holds the image's timestamp), sorted and
  joined with ";"; an observation without a name contributes its observationType
  (e.g. "blank", "human"); "" when nothing was observed;
- media that are not images (fileMediatype not image/*) are listed as skipped;
- event: the `eventID` of the image's observations (media-level, or the event-level one
  whose window holds its timestamp): stored with the row (Fit's leave-out), grouped by
  `--group-events` (envad.client.events) and written back in Camtrap DP observations;
- non-public media (`filePublic` false: typically people) are flagged in the score outputs
  (`filePublic: false` among the item's source values) and, with `skip_non_public`,
  listed as skipped instead of being read.
Resource paths are read from datapackage.json when it names them.
"""

from __future__ import annotations

import bisect
import csv
import json
from collections import defaultdict
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

from envad.client.sources.base import (
    Source,
    SourceItem,
    parse_timestamp,
    register_source,
    resolve_uri,
)
from envad.errors import InvalidInput

ENV_BY = ("location", "deployment")


@register_source
class CamtrapDPSource(Source):
    """Images of a Camtrap DP package (see the module docstring for the mapping)."""

    name = "camtrap-dp"

    @classmethod
    def detect(cls, path: Path) -> bool:
        if path.is_file() and path.name == "datapackage.json":
            path = path.parent
        return path.is_dir() and (
            (path / "media.csv").is_file() and (path / "deployments.csv").is_file()
            or _names_camtrap_resources(path / "datapackage.json")
        )

    def __init__(
        self, path: str | Path, *, split: str | None = None, env_by: str = "location",
        skip_non_public: bool = False,
    ) -> None:
        path = Path(path)
        super().__init__(path.parent if path.name == "datapackage.json" else path, split=split)
        if env_by not in ENV_BY:
            raise InvalidInput(f"env_by must be one of {ENV_BY}, got {env_by!r}")
        self.env_by = env_by
        self.skip_non_public = skip_non_public
        self.resources = _resource_paths(self.path)
        for needed in ("deployments", "media"):
            if not self.resources[needed].is_file():
                raise InvalidInput(f"Camtrap DP package {self.path} has no {needed} resource")

    def describe(self) -> dict[str, str]:
        described = {**super().describe(), "env_by": self.env_by}
        if self.skip_non_public:  # only when set, so earlier checkpoints stay resumable
            described["skip_non_public"] = "True"
        return described

    def __iter__(self) -> Iterator[SourceItem]:
        envs = self._deployment_envs()
        labels = _ObservationLabels(self.resources.get("observations"))
        media_columns = ("mediaID", "deploymentID", "filePath")
        for line, row in _read_csv(self.resources["media"], media_columns):
            where = f"{self.resources['media']}:{line}: "
            deployment, media = row["deploymentID"], row["mediaID"]
            if deployment not in envs:
                raise InvalidInput(f"{where}unknown deploymentID {deployment!r}")
            timestamp = parse_timestamp(row.get("timestamp"), where)
            mediatype = (row.get("fileMediatype") or "").strip().lower()
            key = f"{deployment}/{media}"
            public = _file_public(row.get("filePublic"), where)
            extra: dict[str, object] = {"deploymentID": deployment, "mediaID": media}
            event = labels.event(deployment, media, timestamp)
            if public is not None:
                extra["filePublic"] = public
            yield SourceItem(
                key=key,
                id=key,
                uri=resolve_uri(self.path, row["filePath"]),
                env=envs[deployment],
                label=labels.label(deployment, media, timestamp),
                split=self._split(None),
                timestamp=timestamp,
                event=event,
                skip_reason=self._skip_reason(mediatype, public),
                extra=extra,
            )

    def _skip_reason(self, mediatype: str, public: bool | None) -> str:
        if mediatype and not mediatype.startswith("image/"):
            return f"not an image ({mediatype})"
        if self.skip_non_public and public is False:
            return "not public (filePublic=false)"
        return ""

    def _deployment_envs(self) -> dict[str, str]:
        envs: dict[str, str] = {}
        for _, row in _read_csv(self.resources["deployments"], ("deploymentID",)):
            deployment = row["deploymentID"]
            if self.env_by == "deployment":
                envs[deployment] = deployment
            else:
                envs[deployment] = (
                    (row.get("locationID") or "").strip()
                    or (row.get("locationName") or "").strip()
                    or deployment
                )
        return envs


class _ObservationLabels:
    """Label and event lookup from observations.csv: by mediaID, else by the time window
    (eventStart..eventEnd) of the deployment's event-level observations."""

    def __init__(self, path: Path | None) -> None:
        self.by_media: dict[str, set[str]] = defaultdict(set)
        self.event_by_media: dict[str, str] = {}
        # deployment -> (start, end, name, eventID) tuples sorted by start
        self.events: dict[str, list[tuple[datetime, datetime, str, str]]] = defaultdict(list)
        if path is None or not path.is_file():
            return
        for line, row in _read_csv(path, ("deploymentID",)):
            name = (row.get("scientificName") or "").strip() or (
                row.get("observationType") or ""
            ).strip()
            event_id = (row.get("eventID") or "").strip()
            media = (row.get("mediaID") or "").strip()
            if media:
                if name:
                    self.by_media[media].add(name)
                if event_id:
                    self.event_by_media.setdefault(media, event_id)
                continue
            where = f"{path}:{line}: "
            start = parse_timestamp(row.get("eventStart"), where)
            end = parse_timestamp(row.get("eventEnd"), where)
            if start is not None and (name or event_id):
                self.events[row["deploymentID"]].append((start, end or start, name, event_id))
        for events in self.events.values():
            events.sort(key=lambda e: e[0])
        self.starts = {d: [e[0] for e in events] for d, events in self.events.items()}
        self.longest = {d: max(e[1] - e[0] for e in events) for d, events in self.events.items()}

    def label(self, deployment: str, media: str, timestamp: datetime | None) -> str:
        names = set(self.by_media.get(media, ()))
        if not names:
            names = {e[2] for e in self._holding(deployment, timestamp) if e[2]}
        return ";".join(sorted(names))

    def event(self, deployment: str, media: str, timestamp: datetime | None) -> str:
        """The eventID of the image's observations ("" when none names one)."""
        if media in self.event_by_media:
            return self.event_by_media[media]
        return min((e[3] for e in self._holding(deployment, timestamp) if e[3]), default="")

    def _holding(self, deployment: str, timestamp: datetime | None):
        """The deployment's event-level observations whose window holds `timestamp`."""
        if timestamp is None or deployment not in self.events:
            return
        events = self.events[deployment]
        # events starting after the image cannot hold it; walk back from there only as
        # far as the deployment's longest event reaches
        i = bisect.bisect_right(self.starts[deployment], timestamp) - 1
        earliest = timestamp - self.longest[deployment]
        while i >= 0 and events[i][0] >= earliest:
            if timestamp <= events[i][1]:
                yield events[i]
            i -= 1


def _file_public(value: str | None, where: str) -> bool | None:
    """media.csv `filePublic` (a Frictionless boolean); None when the column is absent."""
    if value is None or not value.strip():
        return None
    text = value.strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise InvalidInput(f"{where}filePublic must be true or false, got {value!r}")


def _read_csv(path: Path, required: tuple[str, ...]) -> Iterator[tuple[int, dict[str, str]]]:
    with path.open(newline="", encoding="utf-8-sig") as f:
        reader = csv.DictReader(f)
        missing = [c for c in required if c not in (reader.fieldnames or [])]
        if missing:
            raise InvalidInput(f"{path}: missing column(s) {missing}")
        yield from enumerate(reader, start=2)


def _names_camtrap_resources(descriptor: Path) -> bool:
    if not descriptor.is_file():
        return False
    try:
        resources = json.loads(descriptor.read_text()).get("resources", [])
    except (ValueError, AttributeError):
        return False
    names = {r.get("name") for r in resources if isinstance(r, dict)}
    return {"deployments", "media"} <= names


def _resource_paths(root: Path) -> dict[str, Path]:
    """deployments/media/observations file paths, from datapackage.json when it has them."""
    paths = {name: root / f"{name}.csv" for name in ("deployments", "media", "observations")}
    descriptor = root / "datapackage.json"
    if descriptor.is_file():
        try:
            package = json.loads(descriptor.read_text())
        except ValueError as exc:
            raise InvalidInput(f"{descriptor} is not valid JSON: {exc}") from exc
        for resource in package.get("resources", []):
            name, path = resource.get("name"), resource.get("path")
            if name in paths and isinstance(path, str):
                paths[name] = root / path
    return paths
