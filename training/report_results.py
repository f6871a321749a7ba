"""Assemble docs/RESULTS.md from `envad evaluate` report directories.

Every number comes from a report's results.json / table.md (and its runs' run.json for
training times); the paper's Table 1 (arXiv 2210.03103, iWildCam) is quoted for the
side-by-side. Claims are judged against the spread over seeds, not the mean alone.

    python -m envad.training.report_results --report var/results/pd32 \\
        --command "envad evaluate ..." --wall-time "1h 52m" --out docs/RESULTS.md
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
from pathlib import Path

import numpy as np

from envad.training.metrics import mean_std
from envad.training.protocol import IDENTITY_DEFAULTS, space_label, space_variant

# The paper's Table 1 (ROC-AUC %, iWildCam), columns that have an envad algorithm.
PAPER_TABLE1 = {
    "random": [65.2, 50.1, 65.1, 57.9, 64.1, 43.2, 73.2, 62.6, 60.2],
    "erm": [63.1, 67.7, 63.8, 67.5, 40.4, 61.0, 75.7, 65.1, 63.0],
    "fish": [68.0, 66.1, 66.7, 65.5, 63.3, 59.7, 72.0, 59.4, 65.1],
    "irm": [64.3, 68.7, 66.2, 64.5, 64.4, 61.3, 77.7, 67.0, 66.8],
    "lisa": [75.2, 76.5, 73.9, 78.4, 55.6, 65.1, 66.9, 77.4, 71.1],
    "ea_mocov3": [70.9, 77.0, 71.1, 71.4, 67.7, 60.9, 77.0, 77.8, 71.7],
    "mocov3": [68.4, 71.9, 66.9, 68.5, 63.9, 68.3, 78.9, 76.3, 70.4],
}
PAPER_ROWS = ["IsoForest", "INNE", "LODA", "OCSVM", "PCA", "LOF5", "KNN", "KDE", "Mean AD"]
DISPLAY = {"random": "Random", "erm": "ERM", "irm": "IRM", "fish": "Fish", "lisa": "LISA",
           "groupdro": "GroupDRO", "coral": "CORAL", "mocov3": "MoCo v3",
           "ea_mocov3": "EA-MoCo"}
#: supervised pretrainings that use the camera labels (the paper's "env-aware" ones and
#: GroupDRO / CORAL), each judged against ERM
ENV_AWARE = ("fish", "irm", "lisa", "groupdro", "coral")
PLOTS = ("heatmap.png", "mean_ad.png", "roc.png", "camera_histograms.png")


def per_seed(report: dict, algorithm: str, row: str = "Mean AD", variant: str = "plain",
             split: str = "ood", metric: str = "pooled") -> list[float]:
    """One value per seed (in %): a detector's ROC-AUC or Mean AD over the detectors."""
    return list(by_seed(report, algorithm, row, variant, split, metric).values())


def by_seed(report: dict, algorithm: str, row: str = "Mean AD", variant: str = "plain",
            split: str = "ood", metric: str = "pooled") -> dict[int, float]:
    """{seed: value in %} of `per_seed`, so that two pretrainings pair up seed by seed."""
    detectors = report["config"]["detectors"]
    values = {}
    for run in report["runs"]:
        if run["algorithm"] != algorithm or split not in run["variants"].get(variant, {}):
            continue
        cells = run["variants"][variant][split]
        names = detectors if row == "Mean AD" else [row]
        values[int(run["seed"])] = 100 * float(np.nanmean([cells[d][metric] for d in names]))
    return values


def paired_gaps(a: dict[int, float], b: dict[int, float]
                ) -> tuple[float, float, int, int] | None:
    """a - b seed by seed (the same seed trains both on the same sampling and
    augmentation draws): (mean, std of the differences, seeds where a leads, seeds), or
    None without a common seed."""
    seeds = sorted(set(a) & set(b))
    if not seeds:
        return None
    gaps = [a[s] - b[s] for s in seeds]
    mean, std = mean_std(gaps)
    return mean, std, sum(g > 0 for g in gaps), len(seeds)


def paired(a: dict[int, float], b: dict[int, float]) -> str:
    """`paired_gaps` in words."""
    gaps = paired_gaps(a, b)
    if gaps is None:
        return "no common seed"
    mean, std, ahead, n = gaps
    return f"paired {mean:+.1f} ± {std:.1f}, ahead on {ahead} of {n} seeds"


def compare(a: list[float], b: list[float]) -> str:
    """'holds' if a's mean exceeds b's by more than the larger std over seeds, 'direction
    only' if it exceeds it by less, 'does not hold' otherwise."""
    (ma, sa), (mb, sb) = mean_std(a), mean_std(b)
    if ma > mb + max(sa, sb):
        return "holds"
    return "direction only (gap within seed noise)" if ma > mb else "does not hold"


def _cell(values: list[float]) -> str:
    mean, std = mean_std(values)
    return "–" if math.isnan(mean) else f"{mean:.1f} ± {std:.1f}"


def claims(report: dict) -> list[str]:
    """The paper's two claims, judged on Mean AD (pooled, unseen cameras): each env-aware
    pretraining against ERM, EA-MoCo against MoCo v3 and against all."""
    seeds = {a: by_seed(report, a) for a in report["config"]["algorithms"]}
    seeds = {a: v for a, v in seeds.items() if v}
    scores = {a: list(v.values()) for a, v in seeds.items()}
    lines = []
    if "erm" in scores:
        for a in ENV_AWARE:
            if a in scores:
                aside = "" if a in PAPER_TABLE1 else " (not in the paper's Table 1)"
                lines.append(f"- {DISPLAY[a]} > ERM{aside}: {_cell(scores[a])} vs "
                             f"{_cell(scores['erm'])} -> **{compare(scores[a], scores['erm'])}**"
                             f" ({paired(seeds[a], seeds['erm'])})")
    if "ea_mocov3" in scores and "mocov3" in scores:
        lines.append(f"- EA-MoCo > MoCo v3: {_cell(scores['ea_mocov3'])} vs "
                     f"{_cell(scores['mocov3'])} -> "
                     f"**{compare(scores['ea_mocov3'], scores['mocov3'])}** "
                     f"({paired(seeds['ea_mocov3'], seeds['mocov3'])})")
    if "ea_mocov3" in scores and len(scores) > 1:
        best = max(scores, key=lambda a: mean_std(scores[a])[0])
        others = [a for a in scores if a != "ea_mocov3"]
        runner = max(others, key=lambda a: mean_std(scores[a])[0])
        verdict = compare(scores["ea_mocov3"], scores[runner]) if best == "ea_mocov3" else \
            f"does not hold (best: {DISPLAY.get(best, best)} {_cell(scores[best])})"
        lines.append(f"- EA-MoCo best of all pretrainings: {_cell(scores['ea_mocov3'])} -> "
                     f"**{verdict}**")
    return lines


def beyond(report: dict) -> list[str]:
    """Stylist, ensemble and the raw-pixel floor, averaged over pretrainings."""
    algorithms = [a for a in report["config"]["algorithms"] if per_seed(report, a)]
    lines = []
    gains = [np.mean(per_seed(report, a, variant="stylist")) - np.mean(per_seed(report, a))
             for a in algorithms if per_seed(report, a, variant="stylist")]
    if gains:
        lines.append(f"- Stylist feature selection changes Mean AD by {np.mean(gains):+.1f} "
                     f"points on average over pretrainings (range {min(gains):+.1f} to "
                     f"{max(gains):+.1f}).")
    ens = [np.mean(per_seed(report, a, "Ensemble")) - np.mean(per_seed(report, a))
           for a in algorithms]
    if ens:
        lines.append(f"- The ensemble differs from Mean AD by {np.mean(ens):+.1f} points on "
                     f"average (range {min(ens):+.1f} to {max(ens):+.1f}).")
    raw = report.get("references", {}).get("raw pixels")
    if raw and algorithms:
        knn = {a: np.mean(per_seed(report, a, "KNN")) for a in algorithms}
        best = max(knn, key=lambda a: knn[a])
        lines.append(f"- KNN on raw pixels scores {100 * raw['pooled']:.1f}; the best encoder "
                     f"under KNN ({DISPLAY.get(best, best)}) {knn[best]:.1f}.")
    return lines


def side_by_side(report: dict) -> str:
    """The paper's Table 1 next to ours, cell by cell: 'paper / ours (mean over seeds)'."""
    algorithms = [a for a in PAPER_TABLE1 if a in report["config"]["algorithms"]
                  and per_seed(report, a)]
    lines = ["| detector | " + " | ".join(DISPLAY[a] for a in algorithms) + " |",
             "| --- |" + " --- |" * len(algorithms)]
    for k, row in enumerate(PAPER_ROWS):
        if row != "Mean AD" and row not in report["config"]["detectors"]:
            continue
        cells = [f"{PAPER_TABLE1[a][k]:.1f} / {np.mean(per_seed(report, a, row)):.1f}"
                 for a in algorithms]
        name = f"**{row}**" if row == "Mean AD" else row
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def space_variants(spaces: list[str], adaptation: str) -> list[tuple[str, str]]:
    """(label, result variant) of the raw embedding, then of each space step with the
    report's score adaptation."""
    return [("raw", "plain")] + [(space_label(s, adaptation), space_variant(s, adaptation))
                                 for s in spaces]


def spaces_section(report: dict) -> list[str]:
    """Per pretraining and space step: Mean AD, KNN and the ensemble on unseen cameras
    (pooled), KNN per camera and in distribution, with each space judged against the raw
    embedding seed by seed, and each env-aware pretraining against ERM within each space
    (Mean AD and KNN, paired by seed)."""
    spaces = report["config"].get("spaces") or []
    if not spaces:
        return []
    algorithms = [a for a in report["config"]["algorithms"] if per_seed(report, a)]
    variants = space_variants(spaces, report["config"].get("score_adaptation", "none"))
    lines = ["| pretraining | space | Mean AD | KNN | Ensemble | KNN per camera | KNN ID | "
             "space > raw (Mean AD) |", "| --- |" + " --- |" * 7]
    for algorithm in algorithms:
        base = per_seed(report, algorithm)
        for space, variant in variants:
            mean_ad = per_seed(report, algorithm, variant=variant)
            if not mean_ad:
                continue
            verdict = "–" if variant == "plain" else compare(mean_ad, base)
            lines.append(
                f"| {DISPLAY.get(algorithm, algorithm)} | {space} | {_cell(mean_ad)} | "
                f"{_cell(per_seed(report, algorithm, 'KNN', variant))} | "
                f"{_cell(per_seed(report, algorithm, 'Ensemble', variant))} | "
                f"{_cell(per_seed(report, algorithm, 'KNN', variant, metric='per_camera_mean'))}"
                f" | {_cell(per_seed(report, algorithm, 'KNN', variant, split='id'))} | "
                f"{verdict} |")
    against_erm = [a for a in ENV_AWARE if a in algorithms] if "erm" in algorithms else []
    if against_erm:
        lines.append("")
    for algorithm in against_erm:
        for space, variant in variants:
            for row in ("Mean AD", "KNN"):
                a = by_seed(report, algorithm, row, variant)
                b = by_seed(report, "erm", row, variant)
                if a and b:
                    lines.append(
                        f"- {DISPLAY[algorithm]} > ERM in space {space} ({row}): "
                        f"{_cell(list(a.values()))} vs {_cell(list(b.values()))} -> "
                        f"**{compare(list(a.values()), list(b.values()))}** ({paired(a, b)})")
    return lines


def spaces_grid(report: dict) -> list[str]:
    """One row per pretraining, one column per space step: Mean AD / KNN on the unseen
    cameras (pooled, mean ± std over seeds); the compact form of `spaces_section`."""
    spaces = report["config"].get("spaces") or []
    if not spaces:
        return []
    algorithms = [a for a in report["config"]["algorithms"] if per_seed(report, a)]
    variants = space_variants(spaces, report["config"].get("score_adaptation", "none"))
    lines = ["| pretraining | " + " | ".join(label for label, _ in variants) + " |",
             "| --- |" + " --- |" * len(variants)]
    for algorithm in algorithms:
        cells = [f"{_cell(per_seed(report, algorithm, variant=variant))} / "
                 f"{_cell(per_seed(report, algorithm, 'KNN', variant))}"
                 for _, variant in variants]
        lines.append(f"| {DISPLAY.get(algorithm, algorithm)} | " + " | ".join(cells) + " |")
    return lines


def training_times(report: dict) -> str:
    """Mean training seconds per run and algorithm (recorded with each result)."""
    parts = []
    for algorithm in report["config"]["algorithms"]:
        seconds = [run["training"]["train_seconds"] for run in report["runs"]
                   if run["algorithm"] == algorithm and "train_seconds" in
                   run.get("training", {})]
        if seconds:
            parts.append(f"{algorithm} {np.mean(seconds):.0f} s")
    return ", ".join(parts)


def machines(report: dict) -> str:
    """Where the runs were computed, from the machine record of each result."""
    seen = []
    for run in report["runs"]:
        m = run.get("machine")
        if not m:
            continue
        text = (f"{m.get('gpu') or 'no GPU'}, {m.get('cpu_count')} CPU cores "
                f"({m.get('processor')}), torch {m.get('torch')}")
        if text not in seen:
            seen.append(text)
    return "; ".join(seen) or "not recorded"


def _training_settings(config: dict) -> str:
    """'; task bucket, augment style, ...': the task always (reports leave the paper's
    bucket task out of their config), the other settings when not the paper's."""
    extra = [f"task {config.get('task', 'bucket')}"]
    extra += [f"{key} {config[key]}" for key in ("augment", "aux") if key in config]
    if config.get("hparams"):
        extra.append(f"hparams {json.dumps(config['hparams'], sort_keys=True)}")
    return "; " + ", ".join(extra)


def report_section(report_dir: Path, out: Path, img_dir: Path, command: str,
                   wall_time: str, machine: str, summary: bool = False) -> str:
    """One report's part of RESULTS.md: setup, claims, side-by-side, full grid, plots;
    with `summary`, setup, claims, side-by-side and one Mean AD / KNN row per
    pretraining and space step instead of the per-space lists, full grid and plots."""
    report = json.loads((report_dir / "results.json").read_text())
    config, tag = report["config"], report_dir.name
    machine = machine or f"{machines(report)} (recorded with each run)"
    if not command and (report_dir / "command.txt").is_file():
        command = " ".join((report_dir / "command.txt").read_text().split())
    seeds = sorted({r["seed"] for r in report["runs"]})
    done = sorted({r["algorithm"] for r in report["runs"]}, key=config["algorithms"].index)
    parts = [f"## {report['dataset']}, {config['size']} px ({tag})\n",
             f"- command: `{command}`" if command else "",
             f"- wall time: {wall_time}; machine: {machine}" if wall_time else
             f"- machine: {machine}",
             f"- seeds {seeds}, {config['epochs']} epoch(s), batch {config['batch_size']}; "
             f"pretrainings: {', '.join(done)}" + _training_settings(config),
             (f"- training time per run (sum of its epochs, mean over seeds; EA-MoCo's "
              f"autoencoder preparation not included): {training_times(report)}"),
             f"- every number below: `{report_dir}/results.json` and `table.md`\n"]
    missing = [f"{a} s{s}" for a in config["algorithms"] for s in config["seeds"]
               if not any(r["algorithm"] == a and r["seed"] == s for r in report["runs"])]
    if missing:
        parts.append(f"**Partial**: not yet evaluated: {', '.join(missing)}.\n")
    parts += ["### The paper's claims on this data (Mean AD, pooled, unseen cameras)\n",
              ("\n".join(claims(report)) or "- not applicable: this report holds no pair of "
               "pretrainings that the claims compare") + "\n",
              "### Beyond the paper\n", "\n".join(beyond(report)) + "\n",
              *(["### Space steps (unseen cameras unless marked ID; ROC-AUC %)\n",
                 "\n".join(spaces_section(report)) + "\n"]
                if spaces_section(report) and not summary else []),
              "### Side by side with the paper's Table 1 (paper on iWildCam / envad here)\n",
              side_by_side(report) + "\n"]
    if summary:
        grid = spaces_grid(report)
        if grid:
            parts += ["### Space steps: Mean AD / KNN (ROC-AUC %, unseen cameras, pooled)\n",
                      "\n".join(grid) + "\n"]
        return "\n".join(p for p in parts if p)
    table = (report_dir / "table.md").read_text().split("\n", 3)[3]
    parts.append(table.replace("\n## ", "\n### "))
    for plot in PLOTS:
        source = report_dir / plot
        if source.is_file():
            target = source       # a report kept in the docs tree is linked where it is
            if not source.resolve().is_relative_to(out.parent.resolve()):
                target = img_dir / f"{tag}-{plot}"
                shutil.copy(source, target)
            link = Path(target).resolve().relative_to(out.parent.resolve())
            parts.append(f"![{tag} {plot}]({link})\n")
    return "\n".join(p for p in parts if p)


#: training settings a report records, in the order a pair's heading names them
_PAIRED_SETTINGS = ("task", "augment", "aux", "hparams", "epochs", "size", "batch_size")


def _differences(a: dict, b: dict) -> list[str]:
    """'task class against bucket', ...: each training setting two configs disagree on."""
    out = []
    for key in _PAIRED_SETTINGS:
        va, vb = (c.get(key, IDENTITY_DEFAULTS.get(key)) for c in (a, b))
        if va != vb:
            show = (lambda v: json.dumps(v, sort_keys=True)) if key == "hparams" else str
            out.append(f"{key} {show(va)} against {show(vb)}")
    return out


def _pair_reports(a_dir: Path, b_dir: Path) -> tuple[dict, dict, list[str], list]:
    """Two reports' results, the training settings they differ in, and the space-step
    variants both were scored in."""
    a, b = (json.loads((d / "results.json").read_text()) for d in (a_dir, b_dir))
    differ = _differences(a["config"], b["config"]) or ["no training setting"]
    shared = [s for s in a["config"].get("spaces") or [] if s in (b["config"].get("spaces")
                                                                  or [])]
    return a, b, differ, space_variants(shared, a["config"].get("score_adaptation", "none"))


def pair_section(a_dir: Path, b_dir: Path) -> str:
    """Two reports of the same pretrainings that differ in a training setting (say the
    class task against the paper's bucket task): each pretraining's Mean AD on the unseen
    cameras in every space step both were scored in, A - B paired by seed."""
    a, b, differ, variants = _pair_reports(a_dir, b_dir)
    lines = [f"## {a_dir.name} against {b_dir.name}: {', '.join(differ)}\n",
             f"- Mean AD (pooled, unseen cameras) of each pretraining in both reports, "
             f"{a_dir.name} minus {b_dir.name} paired by seed; every number: "
             f"`{a_dir}/results.json` and `{b_dir}/results.json`\n",
             f"| pretraining | space | {a_dir.name} | {b_dir.name} | difference |",
             "| --- |" + " --- |" * 4]
    algorithms = [x for x in a["config"]["algorithms"] if x in b["config"]["algorithms"]]
    for algorithm in algorithms:
        for space, variant in variants:
            va, vb = by_seed(a, algorithm, variant=variant), by_seed(b, algorithm,
                                                                     variant=variant)
            if va and vb:
                lines.append(f"| {DISPLAY.get(algorithm, algorithm)} | {space} | "
                             f"{_cell(list(va.values()))} | {_cell(list(vb.values()))} | "
                             f"{paired(va, vb)} |")
    return "\n".join(lines) + "\n"


def pair_grid(a_dir: Path, b_dir: Path) -> str:
    """`pair_section` as one row per pretraining and one column per space step, each
    cell A - B paired by seed (mean ± std of the differences)."""
    a, b, differ, variants = _pair_reports(a_dir, b_dir)
    lines = [f"## {a_dir.name} against {b_dir.name}: {', '.join(differ)}\n",
             f"- Mean AD (pooled, unseen cameras), {a_dir.name} minus {b_dir.name} paired "
             f"by seed (mean ± std of the differences, seeds where A leads); every number: "
             f"`{a_dir}/results.json` and `{b_dir}/results.json`\n",
             "| pretraining | " + " | ".join(label for label, _ in variants) + " |",
             "| --- |" + " --- |" * len(variants)]
    for algorithm in [x for x in a["config"]["algorithms"] if x in b["config"]["algorithms"]]:
        cells = []
        for _, variant in variants:
            gaps = paired_gaps(by_seed(a, algorithm, variant=variant),
                               by_seed(b, algorithm, variant=variant))
            if gaps is None:
                cells.append("–")
                continue
            mean, std, ahead, n = gaps
            cells.append(f"{mean:+.1f} ± {std:.1f} ({ahead}/{n})")
        lines.append(f"| {DISPLAY.get(algorithm, algorithm)} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def sweeps_table(sweep_dirs: list[Path]) -> str:
    """Every `envad sweep` output in one table: per algorithm its tie tolerance and the
    point chosen (each sweep.md's own 'Tie tolerance' and 'Chosen' lines)."""
    lines = ["## Hyperparameter sweeps (training-domain validation)\n",
             "- each algorithm's points against its default on the training cameras' `val` "
             "split; every number: `SWEEP/sweep.json` and `sweep.md`\n",
             "| sweep | algorithm | tie tolerance | chosen |", "| --- | --- | --- | --- |"]
    for sweep_dir in sweep_dirs:
        algorithm, tolerance = "", ""
        for line in (sweep_dir / "sweep.md").read_text().splitlines():
            if line.startswith("## "):
                algorithm = line[3:].strip()
            elif line.startswith("Tie tolerance:"):
                tolerance = line.split(":", 1)[1].split("(")[0].strip()
            elif line.startswith("Chosen:"):
                lines.append(f"| `{sweep_dir}` | {algorithm} | {tolerance} | "
                             f"{line.split(':', 1)[1].strip()} |")
    return "\n".join(lines) + "\n"


def sweep_section(sweep_dir: Path) -> str:
    """An `envad sweep` output's part of RESULTS.md: its sweep.md under a heading that
    names the directory, each algorithm a subsection."""
    text = (sweep_dir / "sweep.md").read_text()
    title, _, body = text.partition("\n")
    heading = title.lstrip("# ").strip()
    body = body.replace("\n## ", "\n### ")
    return (f"## {heading} ({sweep_dir.name})\n\n- every number below: "
            f"`{sweep_dir}/sweep.json` and `sweep.md`\n{body}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--report", type=Path, action="append", required=True,
                        help="an `envad evaluate` output directory (repeatable)")
    parser.add_argument("--command", action="append", default=[],
                        help="the exact command that produced each --report, in order")
    parser.add_argument("--wall-time", action="append", default=[],
                        help="its measured wall time, in order")
    parser.add_argument("--machine", default="",
                        help="where the reports were computed (default: the machine "
                             "recorded with each run)")
    parser.add_argument("--sweep", type=Path, action="append", default=[],
                        help="an `envad sweep` output directory (repeatable), placed "
                             "after the reports")
    parser.add_argument("--pair", action="append", default=[], metavar="A:B",
                        help="two --report directories of the same pretrainings scored "
                             "alike but trained differently (repeatable): their Mean AD "
                             "paired by seed, placed after the reports")
    parser.add_argument("--intro", type=Path, help="Markdown placed after the title")
    parser.add_argument("--summary", action="store_true",
                        help="a short document: per report its setup, the paper's claims, "
                             "the side-by-side and one Mean AD / KNN row per pretraining "
                             "and space step; pairs and sweeps as one table each")
    parser.add_argument("--out", type=Path, default=Path("docs/RESULTS.md"))
    parser.add_argument("--img-dir", type=Path, default=Path("docs/img"))
    args = parser.parse_args(argv)
    args.img_dir.mkdir(parents=True, exist_ok=True)
    parts = ["# Results: env-aware pretraining for anomaly detection on unseen cameras\n"]
    if args.intro:
        parts.append(args.intro.read_text())
    for k, report_dir in enumerate(args.report):
        command = args.command[k] if k < len(args.command) else ""
        wall = args.wall_time[k] if k < len(args.wall_time) else ""
        parts.append(report_section(report_dir, args.out, args.img_dir, command, wall,
                                    args.machine, args.summary))
    for pair in args.pair:
        a_dir, sep, b_dir = pair.partition(":")
        if not sep:
            parser.error(f"--pair takes two report directories as A:B, got {pair!r}")
        render = pair_grid if args.summary else pair_section
        parts.append(render(Path(a_dir), Path(b_dir)))
    if args.summary and args.sweep:
        parts.append(sweeps_table(args.sweep))
    elif args.sweep:
        parts += [sweep_section(sweep_dir) for sweep_dir in args.sweep]
    args.out.write_text("\n".join(parts))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
