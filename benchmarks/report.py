"""Render benchmark JSON lines as Markdown tables (the tables of docs/benchmarks.md).

    python -m benchmarks.report var/bench/*.jsonl > tables.md
    python -m benchmarks.report --write-docs docs/benchmarks.md docs/results/bench

With --write-docs, every block of the page between `<!-- bench:NAME.jsonl -->` and
`<!-- /bench -->` is replaced by the table rendered from that file of the results
folder (blocks whose file is absent are left as they are); `make bench` does this.
"""

from __future__ import annotations

import json
import re
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

from envad.server import ann


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
        if not t:
            continue
        lines.append(
            f"| {size} | {t.get('jpeg', '–')} | {_f(t.get('served_images_per_s'))} | "
            f"{_f(t.get('raw_onnx_images_per_s'))} | {_f(t.get('ratio_served_over_raw'), 2)} | "
            f"{_f(lat.get('p50_ms'))} / {_f(lat.get('p99_ms'))} | "
            f"{_f(lat.get('raw_p50_ms'))} / {_f(lat.get('raw_p99_ms'))} | "
            f"{_f(ing.get('ratio_ingest_over_embed'), 2)} | "
            + (f"{_f(hw.get('encoder_gflops'))} ÷ {_f(hw.get('gemm_gflops'))} = "
               f"{_f(hw.get('fraction_of_gemm'), 2)} |" if hw else "– |"))
    return lines


def one_image(records: list[dict]) -> list[str]:
    rows = [r for r in records if r["benchmark"] == "one_image_score"]
    if not rows:
        return []
    named = any("detectors" in r for r in rows)
    lines = ["", "| input px | clients (1 image per Score) | " + ("detectors | " if named else "")
             + "Score images/s | raw ONNX Runtime batch | raw images/s | ratio |",
             "| --- |" + " --- |" * (6 if named else 5)]
    for r in sorted(rows, key=lambda r: (-r["size"], -len(r.get("detectors", "")),
                                         r["clients"])):
        detectors = f"{_detector_set(r.get('detectors', ''))} | " if named else ""
        lines.append(f"| {r['size']} | {r['clients']} | {detectors}"
                     f"{_f(r['served_images_per_s'])} | "
                     f"{r['raw_batch']} | {_f(r['raw_onnx_images_per_s'])} | "
                     f"{_f(r['ratio_served_over_raw'], 2)} |")
    return lines


def _detector_set(names: str) -> str:
    """A detector set as a table cell: the paper's eight by that name."""
    from envad.server.detectors.registry import PAPER_DETECTORS

    return "the paper's eight" if names == "+".join(PAPER_DETECTORS) else names or "?"


def one_image_floor(records: list[dict]) -> list[str]:
    """What a one-image Score cannot do without, against what it takes."""
    rows = [r for r in records if r["benchmark"] == "one_image_floor"]
    if not rows:
        return []
    lines = ["", "| input px | detectors | raw batch 1 ms | decode ms | empty gRPC call ms | "
             "floor ms (sum) | 1-client Score ms | rest ms | highest reachable ratio "
             "(raw ÷ floor) | ratio (raw ÷ Score) |", "| --- |" + " --- |" * 9]
    for r in sorted(rows, key=lambda r: -r["size"]):
        lines.append(f"| {r['size']} | {_detector_set(r['detectors'])} | "
                     f"{_f(r['raw_batch1_ms'], 2)} | {_f(r['decode_ms'], 2)} | "
                     f"{_f(r['empty_call_ms'], 2)} | {_f(r['floor_ms'], 2)} | "
                     f"{_f(r['served_ms'], 2)} | {_f(r['rest_ms'], 2)} | "
                     f"{_f(r['ceiling_ratio_over_raw'], 2)} | "
                     f"{_f(r['ratio_served_over_raw'], 2)} |")
    return lines


def one_image_cpu_floor(records: list[dict]) -> list[str]:
    """What many concurrent one-image Scores cannot do without, per image."""
    rows = [r for r in records if r["benchmark"] == "one_image_cpu_floor"]
    if not rows:
        return []
    lines = ["", "| input px | detectors | clients (1 image per Score) | raw ms per image "
             "(batch, every core) | decode CPU ms | empty gRPC call CPU ms (of it the "
             "clients') | floor ms per image (raw + CPU ÷ cores) | highest reachable "
             "images/s | Score images/s | highest reachable ratio (raw ÷ floor) | ratio "
             "(Score ÷ raw) |", "| --- |" + " --- |" * 10]
    for r in sorted(rows, key=lambda r: -r["size"]):
        lines.append(f"| {r['size']} | {_detector_set(r['detectors'])} | {r['clients']} | "
                     f"{_f(r['raw_ms_per_image'], 2)} ({r['raw_batch']}) | "
                     f"{_f(r['decode_cpu_ms'], 2)} | {_f(r['empty_call_cpu_ms'], 2)} "
                     f"({_f(r['empty_call_client_cpu_ms'], 2)}) | "
                     f"{_f(r['floor_ms_per_image'], 2)} ({r['cores']} cores) | "
                     f"{_f(r['ceiling_images_per_s'], 1)} | {_f(r['served_images_per_s'], 1)} | "
                     f"{_f(r['ceiling_ratio_over_raw'], 2)} | "
                     f"{_f(r['ratio_served_over_raw'], 2)} |")
    return lines


def serving_all(records: list[dict]) -> list[str]:
    return (serving(records) + one_image(records) + one_image_floor(records)
            + one_image_cpu_floor(records))


def threads(records: list[dict]) -> list[str]:
    rounds = records[0].get("rounds", 1)
    lines = [f"| setting (best of {rounds} rounds) | 1 client images/s | 16 clients images/s "
             "| p50 ms | x default (1 / 16 clients / p50) |",
             "| --- |" + " --- |" * 4]
    for r in records:
        lines.append(
            f"| {r['setting']} | {_f(r['one_client_images_per_s'])} | "
            f"{_f(r['sixteen_clients_images_per_s'])} | {_f(r['p50_ms'])} | "
            f"{_f(r['one_client_images_per_s_over_default'], 2)} / "
            f"{_f(r['sixteen_clients_images_per_s_over_default'], 2)} / "
            f"{_f(r['p50_ms_over_default'], 2)} |")
    return lines


def rpc_pool(records: list[dict]) -> list[str]:
    rounds = records[0].get("rounds", 1)
    lines = [f"| gRPC handlers' pool | before the rounds | 1 client images/s (best of {rounds}) "
             "| 1 client ms | x standard pool after the burst | 16 clients images/s "
             "| x standard pool |",
             "| --- |" + " --- |" * 6]
    for r in records:
        state = "a burst of 16 clients" if r["after_burst"] else "never more than 1 client"
        lines.append(
            f"| {r['pool']} | {state} | {_f(r['one_client_images_per_s'])} | "
            f"{_f(r['one_client_ms'], 2)} | "
            f"{_f(r['ratio_one_client_over_standard_after_burst'], 2)} | "
            f"{_f(r.get('sixteen_clients_images_per_s'))} | "
            f"{_f(r.get('ratio_sixteen_clients_over_standard'), 2)} |")
    return lines


def _pair(record: dict, key: str, digits: int) -> str:
    """`envad / pyod (xratio)` for one measurement of a detector record."""
    ours, ref = record.get(f"{key}_envad"), record.get(f"{key}_pyod")
    ratio = f" (x{ours / ref:.2f})" if ours is not None and ref else ""
    return f"{_f(ours, digits)} / {_f(ref, digits)}{ratio}"


def _with_events(record: dict) -> str:
    """The fit with the rows' events (cross-fitted where the detector cannot leave an
    event out) and its ratio to the plain fit."""
    seconds = record.get("fit_seconds_envad_with_events")
    if seconds is None:
        return "–"
    return f"{seconds:.2f} (x{record['fit_ratio_with_events_over_without']:.2f})"


def detectors(records: list[dict]) -> list[str]:
    queries = records[0].get("n_queries", "")
    lines = [f"| detector | rows | fit s: envad / pyod | fit with events s (x without) | "
             f"score {queries} queries s: envad / pyod | one query ms: envad / pyod | "
             "Spearman |", "| --- |" + " --- |" * 6]
    for r in records:
        lines.append(
            f"| {r['detector']} | {r['n_reference']:,} | {_pair(r, 'fit_seconds', 2)} | "
            f"{_with_events(r)} | {_pair(r, 'score_seconds', 3)} | "
            f"{_pair(r, 'single_query_ms', 2)} | {_f(r.get('spearman'), 4)} |")
    notes = [f"- KNN, {r['n_reference']:,} rows: {r['n_queries']:,} queries through envad's "
             f"KNN take {_f(r['score_ratio_envad_over_raw_faiss'], 2)}x the time of the raw "
             f"FAISS search ({_f(r['score_seconds_raw_faiss'], 3)} s)"
             for r in records if "score_ratio_envad_over_raw_faiss" in r]
    notes += [f"- KDE, {r['n_reference']:,} rows: scored against its capped reference sample "
              f"of {r['kde_reference_rows']:,} rows, Spearman "
              f"{_f(r['spearman_capped_vs_uncapped'], 4)} against all rows "
              f"({_f(r['score_seconds_envad'], 3)} s instead of "
              f"{_f(r['score_seconds_uncapped'], 3)} s)"
              for r in records if "spearman_capped_vs_uncapped" in r]
    return lines + ([""] + notes if notes else [])


def train_speed(records: list[dict]) -> list[str]:
    sizes = sorted({r["size"] for r in records})
    rounds = records[0].get("rounds", 1)
    lines = [f"Images/s of the **best single step** of {rounds} rounds (not an epoch's rate: "
             "an epoch also loads and augments its batches).", "",
             "| algorithm | " + " | ".join(f"{s} px images/s | x ERM" for s in sizes) + " |",
             "| --- |" + " --- | --- |" * len(sizes)]
    by = {(_train_speed_label(r), r["size"]): r for r in records}
    for label in dict.fromkeys(_train_speed_label(r) for r in records):
        cells = []
        for s in sizes:
            r = by.get((label, s), {})
            cells += [_f(r.get("images_per_s")) if "images_per_s" in r else "no training",
                      _f(r.get("relative_to_erm"), 2)]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    gemm = {r["size"]: r.get("gemm_gflops") for r in records}
    lines.append("")
    lines.append("float32 GEMM rate measured in the same run: " +
                 ", ".join(f"{_f(g)} GFLOP/s" for g in dict.fromkeys(gemm.values())))
    layout = [r for r in records if "relative_to_contiguous" in r]
    if layout:
        lines.append("")
        lines.append("ERM with channels-last convolution weights (as `envad train` places "
                     "them) against contiguous ones, same rounds: " +
                     ", ".join(f"{_f(r['relative_to_contiguous'], 2)}x at {r['size']} px"
                               for r in layout))
    return lines


def _train_speed_label(record: dict) -> str:
    if record.get("layout") == "contiguous":
        return f"{record['algorithm']} (contiguous weights, reference)"
    return record["algorithm"]


def encode_devices(records: list[dict]) -> list[str]:
    first = records[0]
    lines = [f"Images/s of one {first['batch']}-image batch at {first['size']} px, the best "
             f"of {first['rounds']} rounds.", "",
             "| engine | provider | images/s | x ONNX Runtime CPU | max difference from it |",
             "| --- | --- | --- | --- | --- |"]
    for r in records:
        where = ", ".join(r["providers"]) + (f" ({r['gpu']})" if r.get("gpu") else "")
        if "missing" in r:
            lines.append(f"| {r['engine']} | {where} | not available: {r['missing']} | | |")
            continue
        lines.append(f"| {r['engine']} | {where} | {_f(r['images_per_s'])} | "
                     f"{_f(r['relative_to_onnxruntime_cpu'], 2)} | "
                     f"{r['max_abs_difference']:.1e} |")
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


def scale(records: list[dict]) -> list[str]:
    lines = ["| rows | index | search p50 ms (÷ first size) | with a camera filter | "
             "recall@10 / filtered | restart: rebuilt s / loaded s (ratio) | save s | "
             "RSS bytes per row (per added row) | index bytes per row |",
             "| --- |" + " --- |" * 8]
    for r in sorted(records, key=lambda r: (r["rows"], r["kind"])):
        lines.append(
            f"| {r['rows']:,} | {r['kind']} | {_f(r['search_p50_ms'], 2)} "
            f"(x{_f(r['ratio_search_over_first_size'], 2)}) | {_f(r['filtered_p50_ms'], 2)} | "
            f"{_f(r['recall_at_10'], 3)} / {_f(r['filtered_recall_at_10'], 3)} | "
            f"{_f(r['build_s'], 2)} / {_f(r['restart_loaded_s'], 2)} "
            f"(x{_f(r['ratio_restart_loaded_over_rebuilt'], 2)}) | {_f(r['save_s'], 2)} | "
            f"{r['rss_bytes_per_row']:,.0f}"
            + (f" ({r['rss_bytes_per_added_row']:,.0f})" if "rss_bytes_per_added_row" in r
               else "") + " | " + (f"{r['index_bytes_per_row']:,.0f}" if "index_bytes_per_row"
                                   in r else "–") + " |")
    return lines


def compressed_candidates(records: list[dict]) -> list[str]:
    lines = ["| rows | index | lists probed | re-rank factor | recall@10 | search p50 ms | "
             "index bytes per row | train s / build s |", "| --- |" + " --- |" * 7]
    for r in records:
        lines.append(f"| {r['rows']:,} | {r['index']} | {r['nprobe']} | "
                     f"{r['rerank_factor'] if r['rerank_factor'] > 1 else '–'} | "
                     f"{_f(r['recall_at_10'], 3)} | {_f(r['search_p50_ms'], 2)} | "
                     f"{r['index_bytes_per_row']:,.0f} | {_f(r['train_s'])} / "
                     f"{_f(r['build_s'])} |")
    return lines


def scale_out(records: list[dict]) -> list[str]:
    lines = ["| rows | saved index | reader start to SERVING s (÷ building it from the store) "
             "| Score/s, 1 reader / 2 readers (ratio) | staleness p50 / p99 ms (refresh s) "
             "| S3 requests per Score |", "| --- |" + " --- |" * 5]
    for r in sorted(records, key=lambda r: (r["rows"], r.get("ivf_threshold") or 0)):
        kind = ("ivf" if r.get("ivf_threshold") and r["rows"] >= r["ivf_threshold"]
                else "flat")
        lines.append(
            f"| {r['rows']:,} | {kind} | {_f(r['reader_start_s'])} "
            f"(x{_f(r['ratio_reader_start_over_rebuild'], 2)}) | "
            f"{_f(r['score_per_s_one_reader'])} / {_f(r['score_per_s_two_readers'])} "
            f"(x{_f(r['ratio_two_over_one'], 2)}) | {_f(r['staleness_p50_ms'], 0)} / "
            f"{_f(r['staleness_p99_ms'], 0)} ({_f(r['refresh_s'])}) | "
            f"{_f(r['requests_per_score'], 2)} |")
    return lines


def server_scale(records: list[dict]) -> list[str]:
    lines = ["| rows | first start to SERVING s | Fit s (rows fitted) | Score p50 ms (÷ first "
             "size) | Search p50 ms (÷ first size) | restart to SERVING s (÷ first size) | "
             "server RSS GiB (bytes per row) | peak RSS GiB (first start) |",
             "| --- |" + " --- |" * 7]
    for r in sorted(records, key=lambda r: r["rows"]):
        kind = f" ({r['index_kind']})" if r.get("index_kind") else ""
        lines.append(
            f"| {r['rows']:,}{kind} | {_f(r['first_start_s'])} | {_f(r['fit_s'])} "
            f"({r['fit_rows']:,}) | {_f(r['score_p50_ms'])} "
            f"(x{_f(r['ratio_score_p50_over_first_size'], 2)}) | {_f(r['search_p50_ms'], 2)} "
            f"(x{_f(r['ratio_search_p50_over_first_size'], 2)}) | {_f(r['restart_s'])} "
            f"(x{_f(r['ratio_restart_over_first_size'], 2)}) | "
            f"{_f(r['rss_bytes'] / 2 ** 30, 2)} ({r['rss_bytes_per_row']:,.0f}) | "
            f"{_f(r['first_peak_rss_bytes'] / 2 ** 30, 2)} |")
    return lines + memory_line(records)


def server_memory(records: list[dict]) -> list[str]:
    mib = 2 ** 20
    lines = ["| stage | stored rows | RSS MiB | anonymous MiB | mapped files MiB | "
             "added over the stage before MiB |", "| --- |" + " --- |" * 5]
    for r in sorted(records, key=lambda r: r["order"]):
        lines.append(f"| {r['stage']} | {r['rows']:,} | {r['VmRSS_bytes'] / mib:,.0f} | "
                     f"{r['RssAnon_bytes'] / mib:,.0f} | {r['RssFile_bytes'] / mib:,.0f} | "
                     f"{r['added_bytes'] / mib:+,.0f} |")
    return lines


#: store sizes the fitted memory line is extrapolated to
EXTRAPOLATED_ROWS = (10_000_000, 100_000_000)


def memory_line(records: list[dict]) -> list[str]:
    """Resident memory as a least-squares line over the sizes measured with the largest
    size's index kind, extrapolated to EXTRAPOLATED_ROWS: nothing with fewer than two
    such sizes, or when that kind is not the compressed one (the kind of those sizes)."""
    kind = max(records, key=lambda r: r["rows"]).get("index_kind")
    if kind is not None and kind not in ann.CODED:
        return []             # the server never holds 10 million rows in this kind
    same = [r for r in records if r.get("index_kind") == kind]
    if len({r["rows"] for r in same}) < 2:
        return []
    slope, fixed = np.polyfit([r["rows"] for r in same], [r["rss_bytes"] for r in same], 1)
    at = ", ".join(f"{rows:,} rows {(fixed + slope * rows) / 2 ** 30:.1f} GiB"
                   for rows in EXTRAPOLATED_ROWS)
    over = f"the {kind} sizes" if kind else "these sizes"
    return ["", f"Resident memory, least-squares line over {over}: "
                f"{fixed / 2 ** 30:.2f} GiB + {slope:,.0f} bytes a row; extrapolated: {at}."]


def ray_backfill(records: list[dict]) -> list[str]:
    lines = ["| engine | images | input px | seconds | images/s | x service engine "
             "| x one Ray actor |", "| --- |" + " --- |" * 6]
    for r in records:
        lines.append(f"| {r['engine']} | {r['images']:,} | {r['size']} | {_f(r['seconds'])} | "
                     f"{_f(r['images_per_s'])} | {_f(r.get('ratio_over_service'), 2)} | "
                     f"{_f(r.get('ratio_over_one_worker'), 2)} |")
    return lines


def stored_ids(records: list[dict]) -> list[str]:
    lines = ["| stored rows | ids read once s | a chunk of 4,096 ids: Lance filtered scan s | "
             "held ids, refreshed s | ratio (scan ÷ held) |", "| --- |" + " --- |" * 4]
    for r in sorted(records, key=lambda r: r["rows"]):
        lines.append(f"| {r['rows']:,} | {_f(r['first_read_s'], 2)} | "
                     f"{_f(r['scan_s_per_chunk'], 3)} | {_f(r['held_s_per_chunk'], 4)} | "
                     f"{_f(r['ratio_scan_over_held'], 1)} |")
    return lines


def store_write(records: list[dict]) -> list[str]:
    lines = ["| path | rows | envad s | reference | reference s | ratio | target |",
             "| --- |" + " --- |" * 6]
    for r in records:
        if r["benchmark"] == "store_write":
            lines.append(f"| store write (`StoreWriter.write`, {r['chunk']:,} rows a call) | "
                         f"{r['rows']:,} | {_f(r['writer_s'], 2)} | lancedb `table.add` | "
                         f"{_f(r['lancedb_add_s'], 2)} | {_f(r['ratio'], 2)} (reference s ÷ "
                         f"envad s) | {r['target']} |")
        elif r["benchmark"] == "export_rows":
            for fmt, key, ratio in (("ROWS", "export_rows_s", "rows_ratio"),
                                    ("ARROW", "export_arrow_s", "arrow_ratio")):
                lines.append(f"| Export {fmt} (gRPC, all rows) | {r['rows']:,} | "
                             f"{_f(r[key], 2)} | LanceDB table read | {_f(r['read_s'], 2)} | "
                             f"{_f(r[ratio], 2)} (envad s ÷ reference s) | "
                             f"{'<= 1.5' if fmt == 'ROWS' else '–'} |")
            if "bare_stream_s" in r:        # records before 2026-11-26 lack it
                lines.append(f"| bare gRPC stream of the ROWS export's {r['messages']} "
                             f"messages ({r['message_bytes'] / 1e6:,.0f} MB), unparsed | "
                             f"{r['rows']:,} | {_f(r['bare_stream_s'], 2)} | LanceDB table "
                             f"read | {_f(r['read_s'], 2)} | {_f(r['bare_ratio'], 2)} (bare s "
                             f"÷ reference s); ROWS ÷ bare {_f(r['rows_over_bare'], 2)} | – |")
    return lines


def rows_export(records: list[dict]) -> list[str]:
    lines = ["| ROWS export of a store's rows | rows | envad rows/s | protobuf rows/s "
             "| x protobuf |", "| --- |" + " --- |" * 4]
    what = {"rows_encode": "encoding alone (best of {rounds})",
            "rows_export_rpc": "whole Export RPC through `envad serve` (median of {rounds})"}
    for r in records:
        lines.append(f"| {what[r['benchmark']].format(rounds=r['rounds'])} | {r['rows']:,} | "
                     f"{r['envad_rows_per_s']:,.0f} | {r['protobuf_rows_per_s']:,.0f} | "
                     f"{_f(r['ratio_envad_over_protobuf'], 2)} |")
    return lines


TRAIN_PHASES = ("data", "model", "prepare", "validation", "checkpoints", "curves", "export")


CACHE_STATES = {"off": " (images decoded)", "warm": " (images from the cache)"}
DECODED = {True: " (images decoded ahead)", False: " (images decoded after `import torch`)"}


def _images_label(record: dict) -> str:
    """How a run got its images: from the cache, or decoded (ahead of torch's import, after
    it, or, in records from before decoding ahead existed, unsaid)."""
    if record.get("decoded_cache") == "off" and record.get("decode_ahead") in DECODED:
        return DECODED[record["decode_ahead"]]
    return CACHE_STATES.get(record.get("decoded_cache", ""), "")


def train_overhead(records: list[dict]) -> list[str]:
    lines = ["| algorithm | wall s | training epochs s | fixed cost s (÷ one ERM epoch) | "
             "start-up s (python + `import torch` alone) | " + " | ".join(
                 f"{phase} s" for phase in TRAIN_PHASES) + " |",
             "| --- |" + " --- |" * (4 + len(TRAIN_PHASES))]
    for r in records:
        if r["benchmark"] != "train_overhead":
            continue
        phases = r["phases_s"]
        lines.append(
            f"| {r['algorithm']}{', a later run in one process' if r.get('in_process') else ''}"
            f"{_images_label(r)}{', ' + r['files'] if r.get('files') else ''} | "
            f"{_f(r['wall_s'], 2)} | {_f(r['epochs_s'], 2)} | "
            f"{_f(r['fixed_s'], 2)} (x{_f(r['ratio_fixed_over_erm_epoch'], 2)}) | "
            f"{_f(r['startup_s'], 2)} ({_f(r['import_torch_s'], 2)}) | "
            + " | ".join(_f(phases.get(phase), 2) for phase in TRAIN_PHASES) + " |")
    decodes = [r for r in records if r["benchmark"] == "train_decode"]
    if decodes:
        lines += ["", "| training images at 32 px | images | mean file bytes | decoded s | "
                  "reference: one thread, file after file s | ratio (reference ÷ decoded) | "
                  "from the decoded-image cache s | ratio (decoded ÷ cache) |",
                  "| --- |" + " --- |" * 7]
        lines += [f"| {r['files']} | {r['images']:,} | {r['mean_file_bytes']:,} | "
                  f"{_f(r['decode_s'], 2)} | {_f(r['one_thread_s'], 2)} | "
                  f"{_f(r['ratio_one_thread_over_decode'], 2)} | {_f(r.get('cached_s'), 3)} | "
                  f"{_f(r.get('ratio_decode_over_cached'), 1)} |" for r in decodes]
    embeds = [r for r in records if r["benchmark"] == "train_validation_embed"]
    if embeds:
        capability = embeds[0].get("cpu_capability")
        where = f" (torch's CPU capability: {capability})" if capability else ""
        lines += ["", f"| embedding validation's images at 32 px{where} | images | s | "
                  "ratio (s ÷ validation's copy's) |", "| --- |" + " --- |" * 3]
        lines += [f"| {r['path']} | {r['images']:,} | {_f(r['seconds'], 2)} | "
                  f"{_f(r['ratio_over_validation'], 2)} |" for r in embeds]
    return lines


def camera_stats(records: list[dict]) -> list[str]:
    lines = ["| cameras | durable update (journal append) ms | reference: whole-state snapshot "
             "ms | ratio (snapshot ÷ update) |", "| --- |" + " --- |" * 3]
    for r in sorted(records, key=lambda r: r["cameras"]):
        lines.append(f"| {r['cameras']:,} | {_f(r['update_ms'], 3)} | {_f(r['snapshot_ms'], 3)} "
                     f"| {_f(r['ratio'], 1)} |")
    return lines


RENDERERS = {"serve_throughput": serving_all, "score_latency": serving_all,
             "ingest": serving_all, "hardware_limit": serving_all, "one_image_score": serving_all,
             "one_image_floor": serving_all, "one_image_cpu_floor": serving_all,
             "detectors": detectors, "train_speed": train_speed, "quantized": quantized,
             "encode_devices": encode_devices,
             "threads": threads, "rpc_pool": rpc_pool, "scale": scale, "server_scale": server_scale,
             "server_memory": server_memory,
             "scale_out": scale_out, "ray_backfill": ray_backfill, "stored_ids": stored_ids,
             "compressed_candidates": compressed_candidates,
             "store_write": store_write,
             "export_rows": store_write, "camera_stats": camera_stats,
             "rows_encode": rows_export, "rows_export_rpc": rows_export,
             "train_overhead": train_overhead, "train_decode": train_overhead,
             "train_validation_embed": train_overhead}
BLOCK = re.compile(r"<!-- bench:(?P<name>[\w.-]+\.jsonl) -->\n.*?<!-- /bench -->", re.S)


def render(path: Path) -> str:
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    if not records:
        return f"({path}: no records)"
    machine = records[0].get("machine", {})
    renderer = RENDERERS[records[0]["benchmark"]]
    device = records[0].get("device", "cpu")
    gpu = f" ({records[0]['gpu']})" if records[0].get("gpu") else ""
    where = f"{device} device{gpu}, " if device != "cpu" else ""
    loads = [r.get("machine", {}).get("load_1min") for r in records]
    loads = [x for x in loads if x is not None]
    busy = bool(loads) and max(loads) > (machine.get("cpu_count") or 1)
    shared = (f"; load average {min(loads)}-{max(loads)} while it ran"
              f"{', so other work shared the machine' if busy else ''}" if loads else "")
    when = f", {machine['date']}" if machine.get("date") else ""
    cpu = f"{machine['cpu']}, " if machine.get("cpu") else ""
    return "\n".join([f"`{path.name}` ({where}{machine.get('cpu_count')} CPU cores, {cpu}"
                      f"{machine.get('machine')}, Python {machine.get('python')}{when}{shared}):",
                      "", *renderer(records)])


def write_docs(doc: Path, results: Path) -> list[str]:
    """Re-render the page's result blocks from `results`; returns the files rendered."""
    rendered: list[str] = []

    def replace(match: re.Match) -> str:
        path = results / match["name"]
        if not path.is_file():
            return match.group(0)
        rendered.append(match["name"])
        return f"<!-- bench:{match['name']} -->\n{render(path)}\n<!-- /bench -->"

    doc.write_text(BLOCK.sub(replace, doc.read_text()))
    return rendered


def main(argv: list[str] | None = None) -> None:
    args = list(argv if argv is not None else sys.argv[1:])
    if args[:1] == ["--write-docs"]:
        if len(args) != 3:
            sys.exit("usage: python -m benchmarks.report --write-docs DOC.md RESULTS_DIR")
        done = write_docs(Path(args[1]), Path(args[2]))
        print(f"{args[1]}: rendered {', '.join(done) or 'nothing'}")
        return
    print("\n\n".join(render(Path(p)) for p in args))


if __name__ == "__main__":
    main()
