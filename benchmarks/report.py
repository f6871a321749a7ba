"""Render benchmark JSON lines as Markdown tables (the tables of docs/benchmarks.md).

    python -m benchmarks.report var/bench/*.jsonl > tables.md
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path


def _f(value, digits: int = 1) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def serving(records: list[dict]) -> list[str]:
    by: defaultdict[str, dict] = defaultdict(dict)
    for r in records:
        by[r["size"]][r["benchmark"]] = r
    lines = ["| input px | JPEG | Score images/s (gRPC, 4 clients) | raw ONNX Runtime images/s "
             "| ratio | Score p50 / p99 ms | raw p50 / p99 ms | Ingest ÷ Embed "
             "| encoder GFLOP/s ÷ GEMM |",
             "| --- |" + " --- |" * 8]
    for size, b in sorted(by.items(), reverse=True):
        t, lat, ing, hw = (b.get(k, {}) for k in ("serve_throughput", "score_latency",
                                                   "ingest", "hardware_limit"))
        lines.append(
            f"| {size} | {t.get('jpeg', '–')} | {_f(t.get('served_images_per_s'))} | "
            f"{_f(t.get('raw_onnx_images_per_s'))} | {_f(t.get('ratio_served_over_raw'), 2)} | "
            f"{_f(lat.get('p50_ms'))} / {_f(lat.get('p99_ms'))} | "
            f"{_f(lat.get('raw_p50_ms'))} / {_f(lat.get('raw_p99_ms'))} | "
            f"{_f(ing.get('ratio_ingest_over_embed'), 2)} | "
            + (f"{_f(hw.get('encoder_gflops'))} ÷ {_f(hw.get('gemm_gflops'))} = "
               f"{_f(hw.get('fraction_of_gemm'), 2)} |" if hw else "– |"))
    return lines


def _pair(record: dict, key: str, digits: int) -> str:
    """`envad / pyod (xratio)` for one measurement of a detector record."""
    ours, ref = record.get(f"{key}_envad"), record.get(f"{key}_pyod")
    ratio = f" (x{ours / ref:.2f})" if ours is not None and ref else ""
    return f"{_f(ours, digits)} / {_f(ref, digits)}{ratio}"


def detectors(records: list[dict]) -> list[str]:
    queries = records[0].get("n_queries", "")
    lines = [f"| detector | rows | fit s: envad / pyod | score {queries} queries s: envad / "
             "pyod | one query ms: envad / pyod | Spearman |", "| --- |" + " --- |" * 5]
    for r in records:
        lines.append(
            f"| {r['detector']} | {r['n_reference']:,} | {_pair(r, 'fit_seconds', 2)} | "
            f"{_pair(r, 'score_seconds', 3)} | {_pair(r, 'single_query_ms', 2)} | "
            f"{_f(r.get('spearman'), 4)} |")
    return lines


def train_speed(records: list[dict]) -> list[str]:
    sizes = sorted({r["size"] for r in records})
    lines = ["| algorithm | " + " | ".join(f"{s} px images/s | x ERM" for s in sizes) + " |",
             "| --- |" + " --- | --- |" * len(sizes)]
    by = {(r["algorithm"], r["size"]): r for r in records}
    for algorithm in dict.fromkeys(r["algorithm"] for r in records):
        cells = []
        for s in sizes:
            r = by.get((algorithm, s), {})
            cells += [_f(r.get("images_per_s")) if "images_per_s" in r else "no training",
                      _f(r.get("relative_to_erm"), 2)]
        lines.append(f"| {algorithm} | " + " | ".join(cells) + " |")
    gemm = {r["size"]: r.get("gemm_gflops") for r in records}
    lines.append("")
    lines.append("float32 GEMM rate measured in the same run: " +
                 ", ".join(f"{_f(g)} GFLOP/s" for g in dict.fromkeys(gemm.values())))
    return lines


def quantized(records: list[dict]) -> list[str]:
    lines = ["| model | px | fp32 images/s | int8 images/s | ratio | KNN ROC-AUC fp32 → int8 | "
             "ensemble ROC-AUC fp32 → int8 |", "| --- |" + " --- |" * 6]
    for r in records:
        lines.append(
            f"| {r['model']} | {r['size']} | {_f(r['fp32_images_per_s'])} | "
            f"{_f(r['int8_images_per_s'])} | {_f(r['throughput_ratio_int8_over_fp32'], 2)} | "
            f"{_f(r['roc_auc_fp32']['KNN'], 3)} → {_f(r['roc_auc_int8']['KNN'], 3)} | "
            f"{_f(r['roc_auc_fp32']['ensemble'], 3)} → {_f(r['roc_auc_int8']['ensemble'], 3)} |")
    return lines


RENDERERS = {"serve_throughput": serving, "score_latency": serving, "ingest": serving,
             "hardware_limit": serving, "detectors": detectors, "train_speed": train_speed,
             "quantized": quantized}


def render(path: Path) -> str:
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    if not records:
        return f"({path}: no records)"
    machine = records[0].get("machine", {})
    renderer = RENDERERS[records[0]["benchmark"]]
    device = records[0].get("device", "cpu")
    where = f"{device} device, " if device != "cpu" else ""
    return "\n".join([f"`{path.name}` ({where}{machine.get('cpu_count')} CPU cores, "
                      f"{machine.get('machine')}, Python {machine.get('python')}):", "",
                      *renderer(records)])


def main(argv: list[str] | None = None) -> None:
    paths = [Path(p) for p in (argv if argv is not None else sys.argv[1:])]
    print("\n\n".join(render(p) for p in paths))


if __name__ == "__main__":
    main()
