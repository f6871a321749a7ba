"""Write an evaluation's table.md, table.csv, results.json and plots from its results."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np

from envad.training.metrics import mean_std
from envad.training.plots import write_plots
from envad.training.protocol import ENSEMBLE, MEAN_AD, fit_indices, space_label, space_variant
from envad.training.references import cached_reference_rows


def grid(results: list[dict], detectors: list[str], algorithms: list[str], variant: str,
         split: str = "ood", metric: str = "pooled") -> dict[tuple[str, str], tuple]:
    """{(row, algorithm): (mean, std, n)} with rows = detectors + Ensemble + Mean AD.

    Mean AD is the mean over the detectors (not the ensemble) within a seed, then mean ±
    std over seeds.
    """
    cells = {}
    for algorithm in algorithms:
        runs = [r for r in results if r["algorithm"] == algorithm
                and split in r["variants"].get(variant, {})]
        for row in detectors + [ENSEMBLE]:
            values = [r["variants"][variant][split][row][metric] for r in runs]
            cells[(row, algorithm)] = (*mean_std(values), len(values))
        per_seed = [np.nanmean([r["variants"][variant][split][d][metric] for d in detectors])
                    for r in runs]
        cells[(MEAN_AD, algorithm)] = (*mean_std(per_seed), len(per_seed))
    return cells


def _fmt(cell: tuple) -> str:
    mean, std, n = cell
    if n == 0 or math.isnan(mean):
        return "–"
    return f"{100 * mean:.1f} ± {100 * std:.1f}" if n > 1 else f"{100 * mean:.1f}"


def markdown_table(cells: dict, rows: list[str], algorithms: list[str],
                   labels: dict[str, str] | None = None) -> str:
    labels = labels or {}
    head = "| detector | " + " | ".join(labels.get(a, a) for a in algorithms) + " |"
    lines = [head, "| --- |" + " --- |" * len(algorithms)]
    for row in rows:
        values = [_fmt(cells[(row, a)]) for a in algorithms]
        if row == MEAN_AD:
            lines.append(f"| **{row}** | " + " | ".join(f"**{v}**" for v in values) + " |")
        else:
            lines.append(f"| {row} | " + " | ".join(values) + " |")
    return "\n".join(lines)


def summary_table(tables: dict, results: list[dict], algorithms: list[str],
                  spaces: tuple[str, ...] = (), score_adaptation: str = "none") -> str:
    """One row per pretraining: Mean AD on unseen cameras (pooled, per camera) beside the
    in-distribution reference, the ensemble, the Stylist variant and the encoder's val
    bucket accuracy (k-NN), so the OOD numbers can be read against the ID ones."""
    columns = [("OOD pooled", ("plain", "ood", "pooled"), MEAN_AD),
               ("OOD per camera", ("plain", "ood", "per_camera_mean"), MEAN_AD),
               ("ID pooled", ("plain", "id", "pooled"), MEAN_AD),
               ("Ensemble OOD", ("plain", "ood", "pooled"), ENSEMBLE),
               ("+Stylist OOD", ("stylist", "ood", "pooled"), MEAN_AD)]
    for space in spaces:
        variant = space_variant(space, score_adaptation)
        space = space_label(space, score_adaptation)
        columns += [(f"OOD pooled [{space}]", (variant, "ood", "pooled"), MEAN_AD),
                    (f"OOD per camera [{space}]", (variant, "ood", "per_camera_mean"),
                     MEAN_AD),
                    (f"ID pooled [{space}]", (variant, "id", "pooled"), MEAN_AD),
                    (f"Ensemble OOD [{space}]", (variant, "ood", "pooled"), ENSEMBLE)]
    columns = [c for c in columns if c[1] in tables]
    head = ["pretraining"] + [c[0] for c in columns] + ["Stylist fraction", "val k-NN acc"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for algorithm in algorithms:
        runs = [r for r in results if r["algorithm"] == algorithm]
        cells = [_fmt(tables[key][(row, algorithm)]) for _, key, row in columns]
        fractions = sorted({r["stylist"]["fraction"] for r in runs if "stylist" in r})
        accuracy = [r["training"]["val_knn_acc"] for r in runs
                    if "val_knn_acc" in r.get("training", {})]
        acc = mean_std(accuracy)
        cells += [", ".join(f"{f:g}" for f in fractions) or "–",
                  _fmt((acc[0], acc[1], len(accuracy)))]
        lines.append(f"| {algorithm} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write_report(config, dataset, results: list[dict], out: Path) -> None:
    detectors = list(config.detectors)
    algorithms = [a for a in config.pretrainings if any(r["algorithm"] == a for r in results)]
    rows = detectors + [ENSEMBLE, MEAN_AD]
    references = cached_reference_rows(dataset, fit_indices(dataset),
                                       dataset.indices(split="test"), config.size,
                                       out / "references.json", config.max_fit)
    variants = (["plain"] + (["stylist"] if config.stylist_fractions else [])
                + [space_variant(s, config.score_adaptation) for s in config.spaces])
    has_id = any("id" in r["variants"]["plain"] for r in results)
    sections = []
    tables = {}
    for variant in variants:
        for split in ["ood"] + (["id"] if has_id else []):
            for metric in ("pooled", "per_camera_mean"):
                tables[(variant, split, metric)] = grid(results, detectors, algorithms,
                                                        variant, split, metric)
    seeds = sorted({r["seed"] for r in results})
    sections.append(f"# Evaluation: {dataset.name}\n\nROC-AUC (%), anomaly = positive class, "
                    f"mean ± std over seeds {seeds}; {config.size} px, {config.epochs} "
                    f"epoch(s). Detectors are fitted on the training cameras' normal `train` "
                    f"images only.\n")
    sections.append("## Summary: Mean AD per pretraining\n\n"
                    + summary_table(tables, results, algorithms, config.spaces,
                                    config.score_adaptation) + "\n")
    titles = {("ood", "pooled"): "Unseen cameras (test), pooled ROC-AUC",
              ("ood", "per_camera_mean"): "Unseen cameras (test), mean per-camera ROC-AUC",
              ("id", "pooled"): "Training cameras, held-out instances (id_test), pooled",
              ("id", "per_camera_mean"): "Training cameras, held-out instances, per camera"}
    for (variant, split, metric), cells in tables.items():
        name = titles[(split, metric)] + {"plain": "", "stylist": " — with Stylist feature "
                                          "selection"}.get(variant, f" — space step "
                                                           f"{variant[len('space:'):]}")
        labels = ({a: f"{a}+Stylist" for a in algorithms} if variant == "stylist" else
                  None if variant == "plain" else
                  {a: f"{a} [{variant[len('space:'):]}]" for a in algorithms})
        sections.append(f"## {name}\n\n{markdown_table(cells, rows, algorithms, labels)}\n")
    if config.orders:
        sections.append(orders_table(results, variants, algorithms))
    if config.stylist_fractions:
        chosen = {a: sorted({r['stylist']['fraction'] for r in results if r['algorithm'] == a})
                  for a in algorithms}
        sections.append("Stylist drop fraction chosen on `val` per run: " + ", ".join(
            f"{a} {v}" for a, v in chosen.items()) + "\n")
    if references:
        sections.append(references_table(references))
    (out / "table.md").write_text("\n".join(sections))
    write_table_csv(out / "table.csv", tables)
    (out / "results.json").write_text(json.dumps({
        "config": {**config.identity(), "algorithms": list(config.pretrainings),
                   "seeds": list(config.seeds)},
        "dataset": dataset.name, "references": references, "runs": results,
    }, indent=1))
    if config.plots:
        write_plots(out, tables, detectors, algorithms, results)


def references_table(references: dict) -> str:
    """The report's section of reference rows (KNN on fixed features)."""
    lines = ["## Reference rows (KNN)\n", "| reference | pooled | mean per camera |",
             "| --- | --- | --- |"]
    lines += [f"| {k} | {100 * v['pooled']:.1f} | {100 * v['per_camera']:.1f} |"
              for k, v in references.items()]
    return "\n".join(lines) + "\n"


def write_table_csv(path: Path, tables: dict) -> None:
    """Every grid cell of every table, one CSV row each."""
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["variant", "split", "metric", "detector", "algorithm", "mean", "std",
                         "n_seeds"])
        for (variant, split, metric), cells in tables.items():
            for (row, algorithm), (mean, std, n) in cells.items():
                writer.writerow([variant, split, metric, row, algorithm, mean, std, n])


def orders_table(results: list[dict], variants: list[str], algorithms: list[str]) -> str:
    """Markdown: the ensemble's pooled ROC-AUC on the unseen cameras in each arrival
    order (envad/arrival_orders.py), mean over seeds, one row per algorithm and
    variant; `worst` is what a pipeline is judged by."""
    orders: list[str] = []
    for r in results:
        for v in r["variants"].values():
            orders += [o for o in v.get("orders", {}) if o not in orders]
    if not orders:
        return ""
    lines = ["## Unseen cameras in arrival orders (ensemble, pooled ROC-AUC %)\n",
             "Each test camera's images in the order named, scored as a stream whose rows "
             "are stored as they are scored (`shuffled`, `normal-first`, new content in "
             "bursts of 8 or 50 frames, new content thinned to 5% or 20% and spread).\n",
             "| pipeline | " + " | ".join(orders) + " |",
             "| --- |" + " --- |" * len(orders)]
    for variant in variants:
        for algorithm in algorithms:
            runs = [r["variants"][variant].get("orders", {}) for r in results
                    if r["algorithm"] == algorithm and variant in r["variants"]]
            if not runs or not runs[0]:
                continue
            cells = [f"{100 * np.mean([run[o]['pooled'] for run in runs if o in run]):.1f}"
                     if any(o in run for run in runs) else "" for o in orders]
            label = algorithm if variant == "plain" else f"{algorithm} [{variant}]"
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
