"""Assemble docs/RESULTS.md from `envad evaluate` report directories.

Usage:
  python scripts/results_doc.py --report var/results/pd32 [--report var/results/pd64] \
      --command-note "..." --out docs/RESULTS.md --img-dir docs/img

Every number in the document comes from the reports' results.json / table.md; the
paper's Table 1 (arXiv 2210.03103, iWildCam) is quoted for the side-by-side.
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
from pathlib import Path

import numpy as np

PAPER_MEAN_AD = {"random": 60.2, "erm": 63.0, "fish": 65.1, "irm": 66.8, "lisa": 71.1,
                 "ea_mocov3": 71.7, "mocov3": 70.4}
SUPERVISED_ENV_AWARE = ("fish", "irm", "lisa", "groupdro", "coral")


def mean_ad(report: dict, algorithm: str, variant: str = "plain") -> tuple[float, float, int]:
    """Mean AD (mean over detectors, then mean ± std over seeds) of one pretraining."""
    detectors = report["config"]["detectors"]
    per_seed = [np.mean([r["variants"][variant]["ood"][d]["pooled"] for d in detectors])
                for r in report["runs"] if r["algorithm"] == algorithm]
    if not per_seed:
        return float("nan"), float("nan"), 0
    std = float(np.std(per_seed, ddof=1)) if len(per_seed) > 1 else 0.0
    return 100 * float(np.mean(per_seed)), 100 * std, len(per_seed)


def claims(report: dict) -> list[str]:
    algorithms = report["config"]["algorithms"]
    scores = {a: mean_ad(report, a) for a in algorithms}
    lines = []
    erm = scores.get("erm")
    if erm and erm[2]:
        for a in ("fish", "irm", "lisa"):
            if a in scores and scores[a][2]:
                verdict = "reproduced" if scores[a][0] > erm[0] else "not reproduced"
                lines.append(f"- {a} > ERM on Mean AD: {scores[a][0]:.1f} vs {erm[0]:.1f} "
                             f"-> **{verdict}** (std over seeds {scores[a][1]:.1f} and "
                             f"{erm[1]:.1f})")
    if "ea_mocov3" in scores and "mocov3" in scores:
        ea, moco = scores["ea_mocov3"], scores["mocov3"]
        verdict = "reproduced" if ea[0] > moco[0] else "not reproduced"
        lines.append(f"- EA-MoCo > MoCo v3 on Mean AD: {ea[0]:.1f} vs {moco[0]:.1f} -> "
                     f"**{verdict}**")
        best = max((a for a in scores if scores[a][2]), key=lambda a: scores[a][0])
        verdict = "reproduced" if best == "ea_mocov3" else f"not reproduced (best: {best})"
        lines.append(f"- EA-MoCo best of all pretrainings on Mean AD -> **{verdict}**")
    return lines


def side_by_side(report: dict) -> str:
    rows = ["| pretraining | paper, iWildCam | envad, PhotoDigits |", "| --- | --- | --- |"]
    for algorithm in report["config"]["algorithms"]:
        ours = mean_ad(report, algorithm)
        paper = PAPER_MEAN_AD.get(algorithm)
        rows.append(f"| {algorithm} | {paper if paper is not None else '–'} | "
                    f"{ours[0]:.1f} ± {ours[1]:.1f} (n={ours[2]}) |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--report", type=Path, action="append", required=True)
    parser.add_argument("--command-note", action="append", default=[])
    parser.add_argument("--out", type=Path, default=Path("docs/RESULTS.md"))
    parser.add_argument("--img-dir", type=Path, default=Path("docs/img"))
    parser.add_argument("--intro", type=Path, help="Markdown file placed after the title")
    args = parser.parse_args()
    args.img_dir.mkdir(parents=True, exist_ok=True)
    parts = ["# Results: env-aware pretraining for anomaly detection on unseen cameras\n"]
    if args.intro:
        parts.append(args.intro.read_text())
    machine = f"{platform.machine()}, {__import__('os').cpu_count()} CPU cores, no GPU"
    for note in args.command_note:
        parts.append(note + "\n")
    for report_dir in args.report:
        report = json.loads((report_dir / "results.json").read_text())
        tag = report_dir.name
        parts.append(f"## {report['dataset']} ({tag})\n")
        parts.append(f"Machine: {machine}. Seeds: {report['config']['seeds']}. Epochs: "
                     f"{report['config']['epochs']}. Generated from "
                     f"`{report_dir}/results.json`.\n")
        parts.append((report_dir / "table.md").read_text().split("\n", 2)[2])
        for plot in ("heatmap.png", "mean_ad.png", "roc.png", "camera_histograms.png"):
            if (report_dir / plot).is_file():
                target = args.img_dir / f"{tag}-{plot}"
                shutil.copy(report_dir / plot, target)
                rel = target.relative_to(args.out.parent) if target.is_relative_to(
                    args.out.parent) else target
                parts.append(f"![{tag} {plot}]({rel})\n")
        parts.append("### Side by side with the paper's Table 1 (Mean AD, %)\n")
        parts.append(side_by_side(report) + "\n")
        parts.append("### The paper's claims on this data\n")
        parts.append("\n".join(claims(report)) + "\n")
    args.out.write_text("\n".join(parts))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
