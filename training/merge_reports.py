"""One report from several `envad evaluate` reports scored alike (one table, one heatmap).

Pretrainings evaluated by separate commands (say the supervised grid, then the
contrastive ones, which train for hours) land in separate reports. When every report
was scored with the same settings (`EvalConfig.identity`: data, detectors and their
settings, training settings, space steps), their runs are results of one evaluation, and
this writes the report that evaluation would have written: the same table.md, table.csv,
results.json and plots, built by the same code (`training.report.write_report`), with no
training or scoring. Reports scored with other settings, or with detector settings other
than this version's, are refused with the first setting that differs; a run (algorithm,
seed) found in two reports is refused too.

Each run's result (and its score arrays, when the report kept them) is also written to
OUT/results/, so `envad evaluate` with the merged algorithms and seeds and `--out OUT`
finds every run finished. Plots that need the score arrays (ROC curves, per-camera
histograms) cover the pretrainings whose arrays were kept, and are left out when none
were (committed reports leave them out).

    python -m envad.training.merge_reports --data var/demo-cl/photodigits \\
        --report docs/results/pd32-e30-grid --report docs/results/pd32-e30-moco \\
        --out docs/results/pd32-e30-nine
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
from pathlib import Path
from typing import Any

from envad.errors import InvalidInput
from envad.training.data import load_dataset
from envad.training.evaluate import EvalConfig, save_result
from envad.training.protocol import IDENTITY_DEFAULTS, result_name
from envad.training.report import write_report

_NOT_IDENTITY = ("algorithms", "seeds")


def read_report(report_dir: Path) -> dict:
    path = Path(report_dir) / "results.json"
    if not path.is_file():
        raise InvalidInput(f"{report_dir}: no results.json (not an `envad evaluate` report)")
    try:
        report = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"{path}: not JSON ({exc})") from exc
    if not isinstance(report, dict) or not {"config", "dataset", "runs"} <= report.keys():
        raise InvalidInput(f"{path}: not the results.json of an `envad evaluate` report "
                           "(it needs config, dataset and runs)")
    return report


def shared_identity(reports: dict[Path, dict]) -> dict:
    """The scoring identity every report shares; InvalidInput naming the first report
    and setting that differ."""
    identities = {d: {k: v for k, v in r["config"].items() if k not in _NOT_IDENTITY}
                  for d, r in reports.items()}
    first_dir, first = next(iter(identities.items()))
    for report_dir, identity in identities.items():
        for key in sorted(first.keys() | identity.keys()):
            default = IDENTITY_DEFAULTS.get(key)
            if first.get(key, default) != identity.get(key, default):
                raise InvalidInput(
                    f"{report_dir} was scored with other settings than {first_dir} "
                    f"({key}: {identity.get(key)!r} against {first.get(key)!r}); only "
                    "reports of one evaluation setting can be merged")
    names = {r["dataset"] for r in reports.values()}
    if len(names) > 1:
        raise InvalidInput(f"the reports evaluate different datasets: {sorted(names)}")
    return first


def merged_runs(reports: dict[Path, dict]) -> tuple[list[dict], list[str], list[int]]:
    """Every run of every report, and the algorithms and seeds in the order first met;
    InvalidInput when one (algorithm, seed) is in two reports."""
    runs: list[dict] = []
    owner: dict[tuple[str, int], Path] = {}
    algorithms: list[str] = []
    seeds: list[int] = []
    for report_dir, report in reports.items():
        for name in report["config"]["algorithms"]:
            if name not in algorithms:
                algorithms.append(name)
        for run in report["runs"]:
            pair = (run["algorithm"], int(run["seed"]))
            if pair in owner:
                raise InvalidInput(f"{pair[0]} seed {pair[1]} is in both {owner[pair]} and "
                                   f"{report_dir}; keep it in one report")
            owner[pair] = report_dir
            runs.append(run)
            if pair[1] not in seeds:
                seeds.append(pair[1])
    return runs, algorithms, sorted(seeds)


def eval_config(identity: dict, data: str, algorithms: list[str], seeds: list[int],
                out: Path) -> EvalConfig:
    """The EvalConfig whose identity is `identity`: its recorded settings, the others at
    their defaults (checked: a detector whose settings changed since the reports were
    scored makes them results of another evaluation)."""
    fields = {f.name for f in dataclasses.fields(EvalConfig)} - {"data", "out"}
    settings: dict[str, Any] = {key: tuple(value) if isinstance(value, list) else value
                                for key, value in identity.items() if key in fields}
    config = EvalConfig(data=data, out=out, algorithms=tuple(algorithms),
                        seeds=tuple(seeds), **settings)
    rebuilt = {**config.identity(), "data": identity.get("data")}
    for key in sorted(rebuilt.keys() | identity.keys()):
        if rebuilt.get(key) != identity.get(key):
            raise InvalidInput(
                f"the reports were scored with {key} {identity.get(key)!r}, this version "
                f"scores with {rebuilt.get(key)!r}; run `envad evaluate` again instead")
    return config


def merge_reports(report_dirs: list[Path], out: Path, data: str | None = None) -> Path:
    """Write the merged report of `report_dirs` to `out`; returns `out`. `data`: the
    dataset folder (default: the one the reports recorded)."""
    if len(report_dirs) < 2:
        raise InvalidInput("name at least two reports to merge")
    named = [Path(d).resolve() for d in report_dirs]
    twice = sorted({str(d) for d in named if named.count(d) > 1})
    if twice:
        raise InvalidInput(f"report named twice: {', '.join(twice)}")
    reports = {Path(d): read_report(Path(d)) for d in report_dirs}
    identity = shared_identity(reports)
    runs, algorithms, seeds = merged_runs(reports)
    out = Path(out)
    config = eval_config(identity, data or identity["data"], algorithms, seeds, out)
    dataset = load_dataset(config.data)
    results_dir = out / "results"
    results_dir.mkdir(parents=True, exist_ok=True)
    first_references = next(iter(reports)) / "references.json"
    if first_references.is_file() and not (out / "references.json").is_file():
        shutil.copy(first_references, out / "references.json")
    for report_dir, report in reports.items():
        for run in report["runs"]:
            save_result(results_dir, run)
            arrays = report_dir / "results" / f"{result_name(run['algorithm'], run['seed'])}.npz"
            if arrays.is_file():
                shutil.copy(arrays, results_dir / arrays.name)
    write_report(config, dataset, runs, out)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--report", type=Path, action="append", required=True,
                        help="an `envad evaluate` output directory (at least two)")
    parser.add_argument("--data", help="the dataset folder (default: the one the reports "
                                       "recorded)")
    parser.add_argument("--out", type=Path, required=True, help="the merged report's "
                                                                "directory")
    args = parser.parse_args(argv)
    out = merge_reports(args.report, args.out, args.data)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
