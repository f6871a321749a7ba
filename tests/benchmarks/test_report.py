"""Benchmark JSON lines render as the Markdown tables of docs/benchmarks.md."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks import report
from benchmarks.run_all import DOCS_PAGES

MACHINE = {"cpu_count": 2, "machine": "x86_64", "python": "3.11.7"}


def _write(tmp_path, name, records):
    path = tmp_path / name
    path.write_text("\n".join(json.dumps({**r, "machine": MACHINE}) for r in records) + "\n")
    return path


def test_detectors_table_shows_ratios_and_missing_references(tmp_path):
    path = _write(tmp_path, "detectors.jsonl", [
        {"benchmark": "detectors", "detector": "INNE", "n_reference": 10000, "n_queries": 1000,
         "fit_seconds_envad": 0.5, "fit_seconds_pyod": 1.0, "score_seconds_envad": 0.01,
         "score_seconds_pyod": 0.1, "single_query_ms_envad": 1.0,
         "single_query_ms_pyod": 13.0, "spearman": 1.0, "fit_seconds_envad_with_events": 2.0,
         "fit_ratio_with_events_over_without": 4.0},
        {"benchmark": "detectors", "detector": "KDE", "n_reference": 100000,
         "n_queries": 1000, "fit_seconds_envad": 0.2, "score_seconds_envad": 3.0,
         "single_query_ms_envad": 9.0}])
    text = report.render(path)
    assert text.startswith("`detectors.jsonl` (2 CPU cores, x86_64, Python 3.11.7):")
    assert ("| INNE | 10,000 | 0.50 / 1.00 (x0.50) | 2.00 (x4.00) | 0.010 / 0.100 (x0.10) | "
            "1.00 / 13.00 (x0.08) | 1.0000 |") in text
    assert "| KDE | 100,000 | 0.20 / – | – | 3.000 / – | 9.00 / – | – |" in text


def test_serving_rows_merge_the_four_benchmarks_of_a_size(tmp_path):
    path = _write(tmp_path, "serving.jsonl", [
        {"benchmark": "serve_throughput", "size": 64, "jpeg": "640x480",
         "served_images_per_s": 120.0, "raw_onnx_images_per_s": 180.0,
         "ratio_served_over_raw": 0.667},
        {"benchmark": "score_latency", "size": 64, "p50_ms": 30.0, "p99_ms": 40.0,
         "raw_p50_ms": 7.0, "raw_p99_ms": 8.0},
        {"benchmark": "ingest", "size": 64, "ratio_ingest_over_embed": 0.7}])
    row = report.render(path).splitlines()[-1]
    assert row == ("| 64 | 640x480 | 120.0 | 180.0 | 0.67 | 30.0 / 40.0 | 7.0 / 8.0 | "
                   "0.70 | – |")


def test_train_speed_table_has_a_column_pair_per_size(tmp_path):
    path = _write(tmp_path, "train_speed.jsonl", [
        {"benchmark": "train_speed", "algorithm": "random", "size": 32, "gemm_gflops": 100.0},
        {"benchmark": "train_speed", "algorithm": "erm", "size": 32, "images_per_s": 110.0,
         "relative_to_erm": 1.0, "gemm_gflops": 100.0},
        {"benchmark": "train_speed", "algorithm": "erm", "size": 64, "images_per_s": 30.0,
         "relative_to_erm": 1.0, "gemm_gflops": 100.0}])
    text = report.render(path)
    assert "| random | no training | – | no training | – |" in text
    assert "| erm | 110.0 | 1.00 | 30.0 | 1.00 |" in text
    assert text.endswith("float32 GEMM rate measured in the same run: 100.0 GFLOP/s")


def test_train_speed_shows_the_contiguous_reference_and_the_layout_ratio(tmp_path):
    common = {"benchmark": "train_speed", "size": 32, "gemm_gflops": 100.0}
    path = _write(tmp_path, "train_speed.jsonl", [
        {**common, "algorithm": "erm", "layout": "channels_last", "images_per_s": 110.0,
         "relative_to_erm": 1.0, "relative_to_contiguous": 1.1},
        {**common, "algorithm": "erm", "layout": "contiguous", "images_per_s": 100.0}])
    text = report.render(path)
    assert "| erm | 110.0 | 1.00 |" in text
    assert "| erm (contiguous weights, reference) | 100.0 | – |" in text
    assert text.endswith("against contiguous ones, same rounds: 1.10x at 32 px")


def test_one_image_rows_name_their_detector_set_when_recorded(tmp_path):
    common = {"benchmark": "one_image_score", "size": 32, "clients": 1, "raw_batch": 1,
              "raw_onnx_images_per_s": 300.0}
    path = _write(tmp_path, "serving.jsonl", [
        {"benchmark": "serve_throughput", "size": 32, "jpeg": "640x480",
         "served_images_per_s": 120.0, "raw_onnx_images_per_s": 180.0,
         "ratio_served_over_raw": 0.667},
        {**common, "detectors": "KNN", "served_images_per_s": 150.0,
         "ratio_served_over_raw": 0.5},
        {**common, "detectors": "IsoForest+INNE+LODA+OCSVM+PCA+LOF5+KNN+KDE",
         "served_images_per_s": 90.0, "ratio_served_over_raw": 0.3}])
    text = report.render(path)
    eight = text.index("| 32 | 1 | the paper's eight | 90.0 | 1 | 300.0 | 0.30 |")
    assert eight < text.index("| 32 | 1 | KNN | 150.0 | 1 | 300.0 | 0.50 |")
    assert "| input px | clients (1 image per Score) | detectors |" in text


def test_docs_tables_are_the_rendered_committed_results():
    root = Path(__file__).resolve().parents[2]
    pages = {page: (root / page).read_text() for page in DOCS_PAGES}
    files = sorted((root / "docs" / "results" / "bench").glob("*.jsonl"))
    assert len(files) >= 5
    for path in files:
        assert any(report.render(path) in text for text in pages.values()), path.name
    for page in DOCS_PAGES[1:]:               # each detail page is linked from the first
        assert page.name in pages[DOCS_PAGES[0]], page


def test_one_image_rows_follow_the_serving_table(tmp_path):
    path = _write(tmp_path, "serving.jsonl", [
        {"benchmark": "serve_throughput", "size": 32, "jpeg": "640x480",
         "served_images_per_s": 120.0, "raw_onnx_images_per_s": 180.0,
         "ratio_served_over_raw": 0.667},
        {"benchmark": "one_image_score", "size": 32, "clients": 16,
         "served_images_per_s": 300.0, "raw_batch": 32, "raw_onnx_images_per_s": 400.0,
         "ratio_served_over_raw": 0.75},
        {"benchmark": "one_image_score", "size": 32, "clients": 1,
         "served_images_per_s": 60.0, "raw_batch": 1, "raw_onnx_images_per_s": 100.0,
         "ratio_served_over_raw": 0.6}])
    lines = report.render(path).splitlines()
    assert lines[-2:] == ["| 32 | 1 | 60.0 | 1 | 100.0 | 0.60 |",
                          "| 32 | 16 | 300.0 | 32 | 400.0 | 0.75 |"]


ONE_CLIENT_FLOOR = {"benchmark": "one_image_floor", "size": 32, "detectors": "KNN",
                    "raw_batch1_ms": 3.0, "decode_ms": 0.7, "empty_call_ms": 0.6,
                    "floor_ms": 4.3, "served_ms": 7.5, "rest_ms": 3.2,
                    "ceiling_ratio_over_raw": 3.0 / 4.3, "ratio_served_over_raw": 0.4}


def test_the_one_image_floor_follows_the_one_image_rows(tmp_path):
    path = _write(tmp_path, "serving.jsonl", [
        ONE_CLIENT_FLOOR,
        {"benchmark": "one_image_score", "size": 32, "clients": 1,
         "served_images_per_s": 60.0, "raw_batch": 1, "raw_onnx_images_per_s": 100.0,
         "ratio_served_over_raw": 0.6}])
    lines = report.render(path).splitlines()
    assert lines[-5] == "| 32 | 1 | 60.0 | 1 | 100.0 | 0.60 |"
    assert lines[-3].startswith("| input px | detectors | raw batch 1 ms | decode ms |")
    assert lines[-1] == "| 32 | KNN | 3.00 | 0.70 | 0.60 | 4.30 | 7.50 | 3.20 | 0.70 | 0.40 |"


def test_the_cpu_floor_of_many_one_image_clients_follows_the_latency_floor(tmp_path):
    path = _write(tmp_path, "serving.jsonl", [
        ONE_CLIENT_FLOOR,
        {"benchmark": "one_image_cpu_floor", "size": 32, "detectors": "KNN", "clients": 16,
         "raw_batch": 32, "cores": 2, "raw_ms_per_image": 1.35, "decode_cpu_ms": 0.9,
         "empty_call_cpu_ms": 0.8, "empty_call_client_cpu_ms": 0.3, "floor_ms_per_image": 2.2,
         "ceiling_images_per_s": 454.5, "served_images_per_s": 320.0,
         "raw_onnx_images_per_s": 740.7, "ceiling_ratio_over_raw": 1.35 / 2.2,
         "ratio_served_over_raw": 320.0 / 740.7}])
    lines = report.render(path).splitlines()
    assert lines[-5] == "| 32 | KNN | 3.00 | 0.70 | 0.60 | 4.30 | 7.50 | 3.20 | 0.70 | 0.40 |"
    assert lines[-3].startswith("| input px | detectors | clients (1 image per Score) |")
    assert lines[-1] == ("| 32 | KNN | 16 | 1.35 (32) | 0.90 | 0.80 (0.30) | 2.20 (2 cores) | "
                         "454.5 | 320.0 | 0.61 | 0.43 |")


def test_the_caption_says_when_other_work_shared_the_machine(tmp_path):
    path = tmp_path / "threads.jsonl"
    records = [{"benchmark": "threads", "setting": name, "rounds": 2, "size": 32,
                "one_client_images_per_s": 50.0 * f, "sixteen_clients_images_per_s": 200.0 * f,
                "p50_ms": 20.0 / f, "one_client_images_per_s_over_default": f,
                "sixteen_clients_images_per_s_over_default": f, "p50_ms_over_default": 1 / f,
                "machine": {**MACHINE, "load_1min": load, "date": "2026-11-23"}}
               for name, f, load in (("default", 1.0, 1.5), ("every pool 1 thread", 0.5, 3.1))]
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    text = report.render(path)
    assert text.splitlines()[0] == (
        "`threads.jsonl` (2 CPU cores, x86_64, Python 3.11.7, 2026-11-23; load average "
        "1.5-3.1 while it ran, so other work shared the machine):")
    assert "| every pool 1 thread | 25.0 | 100.0 | 40.0 | 0.50 / 0.50 / 2.00 |" in text
    assert "| setting (best of 2 rounds) |" in text


def test_the_caption_names_the_cpu_model_when_the_record_has_it(tmp_path):
    path = tmp_path / "camera_stats.jsonl"
    path.write_text(json.dumps({
        "benchmark": "camera_stats", "cameras": 1, "update_ms": 0.2, "snapshot_ms": 1.0,
        "ratio": 5.0, "machine": {**MACHINE, "cpu": "AMD EPYC", "date": "2026-11-26"}}) + "\n")
    assert report.render(path).splitlines()[0] == (
        "`camera_stats.jsonl` (2 CPU cores, AMD EPYC, x86_64, Python 3.11.7, 2026-11-26):")


def test_write_docs_replaces_only_the_blocks_whose_results_exist(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    _write(results, "train_speed.jsonl", [
        {"benchmark": "train_speed", "algorithm": "erm", "size": 32, "images_per_s": 110.0,
         "relative_to_erm": 1.0, "gemm_gflops": 100.0, "rounds": 5}])
    doc = tmp_path / "page.md"
    doc.write_text("intro\n<!-- bench:train_speed.jsonl -->\nold table\n<!-- /bench -->\n"
                   "middle\n<!-- bench:quantized.jsonl -->\nkept\n<!-- /bench -->\nend\n")
    assert report.write_docs(doc, results) == ["train_speed.jsonl"]
    text = doc.read_text()
    assert "old table" not in text and "| erm | 110.0 | 1.00 |" in text
    assert "best single step** of 5 rounds" in text
    assert "kept" in text and text.startswith("intro\n") and text.endswith("end\n")


def test_scale_table_has_a_row_per_size_and_index_kind(tmp_path):
    common = {"benchmark": "scale", "dim": 512, "filtered_p50_ms": 0.5, "recall_at_10": 1.0,
              "filtered_recall_at_10": 1.0, "build_s": 10.0, "restart_loaded_s": 2.0,
              "ratio_restart_loaded_over_rebuilt": 0.2, "save_s": 1.0,
              "rss_bytes_per_row": 2500.0}
    path = _write(tmp_path, "scale.jsonl", [
        {**common, "rows": 100000, "kind": "ivf", "search_p50_ms": 0.4,
         "ratio_search_over_first_size": 1.1, "rss_bytes_per_added_row": 2100.0,
         "index_bytes_per_row": 2070.4},
        {**common, "rows": 10000, "kind": "flat", "search_p50_ms": 1.5,
         "ratio_search_over_first_size": 1.0}])
    rows = report.render(path).splitlines()[-2:]
    assert rows[0].startswith("| 10,000 | flat | 1.50 (x1.00) | 0.50 | 1.000 / 1.000 |")
    assert rows[0].endswith("| 2,500 | – |")              # before index bytes were measured
    assert rows[1] == ("| 100,000 | ivf | 0.40 (x1.10) | 0.50 | 1.000 / 1.000 | "
                       "10.00 / 2.00 (x0.20) | 1.00 | 2,500 (2,100) | 2,070 |")


def test_compressed_candidates_table_has_a_row_per_index_and_factor(tmp_path):
    common = {"benchmark": "compressed_candidates", "rows": 100000, "dim": 512,
              "nprobe": 16, "recall_at_10": 0.98, "search_p50_ms": 0.3, "train_s": 3.0,
              "build_s": 5.0}
    path = _write(tmp_path, "compressed_candidates.jsonl", [
        {**common, "index": "ivf-sq8", "rerank_factor": 1, "index_bytes_per_row": 546.2},
        {**common, "index": "ivf-pq64 + sq8 re-rank", "rerank_factor": 8,
         "index_bytes_per_row": 615.0}])
    rows = report.render(path).splitlines()[-2:]
    assert rows == ["| 100,000 | ivf-sq8 | 16 | – | 0.980 | 0.30 | 546 | 3.0 / 5.0 |",
                    "| 100,000 | ivf-pq64 + sq8 re-rank | 16 | 8 | 0.980 | 0.30 | 615 | "
                    "3.0 / 5.0 |"]


def test_server_scale_table_has_a_row_per_size_with_its_ratios(tmp_path):
    common = {"benchmark": "server_scale", "size": 32, "first_start_s": 3.5, "fit_s": 17.0,
              "first_peak_rss_bytes": 2 ** 31, "rss_bytes": 2 ** 30}
    path = _write(tmp_path, "server_scale.jsonl", [
        {**common, "rows": 1000000, "fit_rows": 20000, "score_p50_ms": 30.0,
         "search_p50_ms": 2.0, "restart_s": 8.0, "rss_bytes_per_row": 1073.7,
         "ratio_score_p50_over_first_size": 1.2, "ratio_search_p50_over_first_size": 2.0,
         "ratio_restart_over_first_size": 2.0},
        {**common, "rows": 10000, "fit_rows": 10000, "score_p50_ms": 25.0,
         "search_p50_ms": 1.0, "restart_s": 4.0, "rss_bytes_per_row": 107374.2,
         "ratio_score_p50_over_first_size": 1.0, "ratio_search_p50_over_first_size": 1.0,
         "ratio_restart_over_first_size": 1.0}])
    rows = [line for line in report.render(path).splitlines() if line.startswith("| 1")]
    assert rows[0] == ("| 10,000 | 3.5 | 17.0 (10,000) | 25.0 (x1.00) | 1.00 (x1.00) | "
                       "4.0 (x1.00) | 1.00 (107,374) | 2.00 |")
    assert rows[1].startswith("| 1,000,000 | 3.5 | 17.0 (20,000) | 30.0 (x1.20) | "
                              "2.00 (x2.00) | 8.0 (x2.00) | 1.00 (1,074) |")


def test_server_memory_table_has_a_row_per_stage_in_order_with_what_it_added(tmp_path):
    mib = 2 ** 20
    path = _write(tmp_path, "server_memory.jsonl", [
        {"benchmark": "server_memory", "order": 2, "stage": "serving an empty store",
         "rows": 0, "VmRSS_bytes": 500 * mib, "RssAnon_bytes": 300 * mib,
         "RssFile_bytes": 200 * mib, "added_bytes": 120 * mib},
        {"benchmark": "server_memory", "order": 1, "stage": "modules", "rows": 0,
         "VmRSS_bytes": 380 * mib, "RssAnon_bytes": 200 * mib, "RssFile_bytes": 180 * mib,
         "added_bytes": 380 * mib},
        {"benchmark": "server_memory", "order": 3, "stage": "serving the rows, no Fit",
         "rows": 20000, "VmRSS_bytes": 450 * mib, "RssAnon_bytes": 260 * mib,
         "RssFile_bytes": 190 * mib, "added_bytes": -50 * mib}])
    assert report.render(path).splitlines()[-3:] == [
        "| modules | 0 | 380 | 200 | 180 | +380 |",
        "| serving an empty store | 0 | 500 | 300 | 200 | +120 |",
        "| serving the rows, no Fit | 20,000 | 450 | 260 | 190 | -50 |"]


def test_store_write_table_shows_the_writer_and_both_export_formats(tmp_path):
    path = _write(tmp_path, "store_write.jsonl", [
        {"benchmark": "store_write", "rows": 100000, "dim": 512, "chunk": 4096,
         "writer_s": 3.0, "lancedb_add_s": 2.0, "ratio": 0.667, "target": ">= 0.6"},
        {"benchmark": "export_rows", "rows": 100000, "read_s": 1.0, "export_rows_s": 1.4,
         "export_arrow_s": 1.1, "rows_ratio": 1.4, "arrow_ratio": 1.1,
         "target": "rows_ratio <= 1.5"}])
    lines = report.render(path).splitlines()
    assert lines[-3] == ("| store write (`StoreWriter.write`, 4,096 rows a call) | 100,000 | "
                         "3.00 | lancedb `table.add` | 2.00 | 0.67 (reference s ÷ envad s) | "
                         ">= 0.6 |")
    assert lines[-2] == ("| Export ROWS (gRPC, all rows) | 100,000 | 1.40 | LanceDB table "
                         "read | 1.00 | 1.40 (envad s ÷ reference s) | <= 1.5 |")
    assert lines[-1].startswith("| Export ARROW (gRPC, all rows) | 100,000 | 1.10 |")
    with path.open("a") as records:         # a record with the bare gRPC stream beside
        records.write(json.dumps({
            "benchmark": "export_rows", "rows": 100000, "read_s": 1.0, "export_rows_s": 1.4,
            "export_arrow_s": 1.1, "rows_ratio": 1.4, "arrow_ratio": 1.1,
            "target": "rows_ratio <= 1.5", "bare_stream_s": 0.8, "messages": 25,
            "message_bytes": 227_000_000, "bare_ratio": 0.8, "rows_over_bare": 1.75,
            "machine": MACHINE}) + "\n")
    assert report.render(path).splitlines()[-1] == (
        "| bare gRPC stream of the ROWS export's 25 messages (227 MB), unparsed | 100,000 | "
        "0.80 | LanceDB table read | 1.00 | 0.80 (bare s ÷ reference s); ROWS ÷ bare 1.75 "
        "| – |")


def test_camera_stats_table_has_a_row_per_camera_count(tmp_path):
    path = _write(tmp_path, "camera_stats.jsonl", [
        {"benchmark": "camera_stats", "cameras": 1000, "dim": 512, "update_ms": 0.25,
         "snapshot_ms": 18.0, "ratio": 72.0},
        {"benchmark": "camera_stats", "cameras": 1, "dim": 512, "update_ms": 0.2,
         "snapshot_ms": 0.8, "ratio": 4.0}])
    lines = report.render(path).splitlines()
    assert lines[-2] == "| 1 | 0.200 | 0.800 | 4.0 |"
    assert lines[-1] == "| 1,000 | 0.250 | 18.000 | 72.0 |"


def test_train_overhead_table_splits_the_fixed_cost_into_phases(tmp_path):
    path = _write(tmp_path, "train_overhead.jsonl", [
        {"benchmark": "train_overhead", "algorithm": "erm", "size": 32, "n_train": 4320,
         "rounds": 3, "wall_s": 30.0, "epochs_s": 24.0, "fixed_s": 6.0, "startup_s": 2.0,
         "phases_s": {"data": 0.6, "model": 1.2, "validation": 1.5, "checkpoints": 0.2,
                      "curves": 0.3, "export": 0.2},
         "import_torch_s": 1.25, "erm_epoch_s": 24.0, "ratio_fixed_over_erm_epoch": 0.25,
         "target": "fixed_s < 5"},
        {"benchmark": "train_overhead", "algorithm": "random", "decoded_cache": "off",
         "size": 32, "n_train": 4320, "rounds": 3, "wall_s": 5.0, "epochs_s": 0.0,
         "fixed_s": 5.0, "startup_s": 2.0, "phases_s": {"data": 0.7, "validation": 1.6},
         "import_torch_s": 1.25, "erm_epoch_s": 24.0, "ratio_fixed_over_erm_epoch": 0.208,
         "target": "fixed_s < 5"},
        {"benchmark": "train_overhead", "algorithm": "erm", "decoded_cache": "warm",
         "in_process": True, "size": 32, "rounds": 3, "wall_s": 28.0, "epochs_s": 24.0,
         "fixed_s": 4.0, "startup_s": 0.1, "phases_s": {"data": 0.2, "validation": 1.5},
         "import_torch_s": 1.25, "erm_epoch_s": 24.0, "ratio_fixed_over_erm_epoch": 0.167,
         "target": "fixed_s < 5"},
        {"benchmark": "train_overhead", "algorithm": "random", "decoded_cache": "off",
         "decode_ahead": False, "files": "640x480 JPEG", "size": 32, "n_train": 4320,
         "rounds": 3, "wall_s": 7.0, "epochs_s": 0.0, "fixed_s": 7.0, "startup_s": 2.0,
         "phases_s": {"data": 2.5, "validation": 1.6}, "import_torch_s": 1.25,
         "erm_epoch_s": 24.0, "ratio_fixed_over_erm_epoch": 0.292, "target": "fixed_s < 5"},
        {"benchmark": "train_decode", "files": "640x480 JPEG", "size": 32, "images": 4320,
         "mean_file_bytes": 24439, "decode_s": 1.5, "one_thread_s": 2.6,
         "ratio_one_thread_over_decode": 1.733, "cached_s": 0.012,
         "ratio_decode_over_cached": 125.0},
        {"benchmark": "train_decode", "files": "PhotoDigits PNG", "size": 32, "images": 4320,
         "mean_file_bytes": 2398, "decode_s": 0.5, "one_thread_s": 0.54,
         "ratio_one_thread_over_decode": 1.07},
        {"benchmark": "train_validation_embed", "path": "inference copy, channels-last "
         "(validation)", "size": 32, "images": 1480, "rounds": 3, "seconds": 1.7,
         "ratio_over_validation": 1.0, "cpu_capability": "AVX2"},
        {"benchmark": "train_validation_embed", "path": "encoder in eval mode", "size": 32,
         "images": 1480, "rounds": 3, "seconds": 2.65, "ratio_over_validation": 1.56,
         "cpu_capability": "AVX2"}])
    lines = report.render(path).splitlines()
    assert lines[4] == (
        "| erm | 30.00 | 24.00 | 6.00 (x0.25) | 2.00 (1.25) | 0.60 | 1.20 | – | 1.50 | "
        "0.20 | 0.30 | 0.20 |")
    assert lines[5] == ("| random (images decoded) | 5.00 | 0.00 | 5.00 (x0.21) | 2.00 (1.25) | "
                        "0.70 | – | – | 1.60 | – | – | – |")
    assert lines[6] == ("| erm, a later run in one process (images from the cache) | 28.00 | "
                        "24.00 | 4.00 (x0.17) | 0.10 (1.25) | 0.20 | – | – | 1.50 | – | – | – |")
    assert lines[7] == ("| random (images decoded after `import torch`), 640x480 JPEG | 7.00 | "
                        "0.00 | 7.00 (x0.29) | 2.00 (1.25) | 2.50 | – | – | 1.60 | – | – | – |")
    assert "| 640x480 JPEG | 4,320 | 24,439 | 1.50 | 2.60 | 1.73 | 0.012 | 125.0 |" in lines
    # a record from before the cache existed renders with dashes for it
    assert "| PhotoDigits PNG | 4,320 | 2,398 | 0.50 | 0.54 | 1.07 | – | – |" in lines
    assert lines[-4] == ("| embedding validation's images at 32 px (torch's CPU capability: "
                         "AVX2) | images | s | ratio (s ÷ validation's copy's) |")
    assert lines[-2] == "| inference copy, channels-last (validation) | 1,480 | 1.70 | 1.00 |"
    assert lines[-1] == "| encoder in eval mode | 1,480 | 2.65 | 1.56 |"


def test_rpc_pool_table_has_a_row_per_server_and_no_burst_figures_for_the_quiet_one(tmp_path):
    path = _write(tmp_path, "rpc_pool.jsonl", [
        {"benchmark": "rpc_pool", "pool": "standard", "after_burst": False, "rounds": 3,
         "one_client_images_per_s": 170.0, "one_client_ms": 5.88,
         "ratio_one_client_over_standard_after_burst": 1.133},
        {"benchmark": "rpc_pool", "pool": "standard", "after_burst": True, "rounds": 3,
         "one_client_images_per_s": 150.0, "one_client_ms": 6.67,
         "ratio_one_client_over_standard_after_burst": 1.0,
         "sixteen_clients_images_per_s": 290.0, "ratio_sixteen_clients_over_standard": 1.0},
        {"benchmark": "rpc_pool", "pool": "envad", "after_burst": True, "rounds": 3,
         "one_client_images_per_s": 175.0, "one_client_ms": 5.71,
         "ratio_one_client_over_standard_after_burst": 1.167,
         "sixteen_clients_images_per_s": 300.0, "ratio_sixteen_clients_over_standard": 1.034}])
    lines = report.render(path).splitlines()
    assert "1 client images/s (best of 3)" in lines[2]
    assert lines[4] == "| standard | never more than 1 client | 170.0 | 5.88 | 1.13 | – | – |"
    assert lines[6] == "| envad | a burst of 16 clients | 175.0 | 5.71 | 1.17 | 300.0 | 1.03 |"


def test_scale_out_table_has_a_row_per_saved_index_kind(tmp_path):
    common = {"benchmark": "scale_out", "rows": 100000, "reader_start_s": 6.0,
              "ratio_reader_start_over_rebuild": 0.5, "score_per_s_one_reader": 20.0,
              "score_per_s_two_readers": 26.0, "ratio_two_over_one": 1.3,
              "staleness_p50_ms": 900.0, "staleness_p99_ms": 2100.0, "refresh_s": 2.0,
              "requests_per_score": 0.0}
    path = _write(tmp_path, "scale_out.jsonl", [{**common, "ivf_threshold": 50000},
                                                {**common, "ivf_threshold": None}])
    rows = report.render(path).splitlines()[-2:]
    assert rows == ["| 100,000 | flat | 6.0 (x0.50) | 20.0 / 26.0 (x1.30) | 900 / 2100 (2.0) "
                    "| 0.00 |",
                    "| 100,000 | ivf | 6.0 (x0.50) | 20.0 / 26.0 (x1.30) | 900 / 2100 (2.0) "
                    "| 0.00 |"]


def test_server_scale_fits_a_memory_line_and_extrapolates_it(tmp_path):
    def record(rows, rss):
        return {"benchmark": "server_scale", "rows": rows, "first_start_s": 1.0, "fit_s": 2.0,
                "fit_rows": 20000, "score_p50_ms": 3.0, "search_p50_ms": 0.5,
                "restart_s": 4.0, "ratio_score_p50_over_first_size": 1.0,
                "ratio_search_p50_over_first_size": 1.0, "ratio_restart_over_first_size": 1.0,
                "rss_bytes": rss, "rss_bytes_per_row": rss / rows,
                "first_peak_rss_bytes": rss}
    gib = 2 ** 30
    path = _write(tmp_path, "server_scale.jsonl", [
        record(1_000_000, gib + 500 * 1_000_000), record(3_000_000, gib + 500 * 3_000_000)])
    text = report.render(path)
    assert ("least-squares line over these sizes: 1.00 GiB + 500 bytes a row; extrapolated: "
            "10,000,000 rows 5.7 GiB, 100,000,000 rows 47.6 GiB.") in text
    one = _write(tmp_path, "one.jsonl", [record(1_000_000, gib)])
    assert "least-squares" not in report.render(one)
    # with index kinds, only the largest size's kind: a flat store's vectors are left out
    kinds = _write(tmp_path, "kinds.jsonl", [
        {**record(100_000, 3 * gib), "index_kind": "flat"},
        {**record(1_000_000, gib + 500 * 1_000_000), "index_kind": "ivf-sq8"},
        {**record(3_000_000, gib + 500 * 3_000_000), "index_kind": "ivf-sq8"}])
    text = report.render(kinds)
    assert "| 100,000 (flat) | 1.0 |" in text
    assert "line over the ivf-sq8 sizes: 1.00 GiB + 500 bytes a row;" in text
    flat = _write(tmp_path, "flat.jsonl", [{**record(n, gib + 2000 * n), "index_kind": "flat"}
                                           for n in (10_000, 100_000)])
    assert "least-squares" not in report.render(flat)    # no store of 10M rows is flat


def test_ray_backfill_rows_carry_both_ratios(tmp_path):
    path = _write(tmp_path, "ray_backfill.jsonl", [
        {"benchmark": "ray_backfill", "engine": "service", "images": 100000, "size": 64,
         "seconds": 400.0, "images_per_s": 250.0, "ratio_over_service": 1.0,
         "ratio_over_one_worker": None},
        {"benchmark": "ray_backfill", "engine": "ray-2", "images": 100000, "size": 64,
         "seconds": 250.0, "images_per_s": 400.0, "ratio_over_service": 1.6,
         "ratio_over_one_worker": 1.2}])
    lines = report.render(path).splitlines()
    assert "| service | 100,000 | 64 | 400.0 | 250.0 | 1.00 | – |" in lines
    assert "| ray-2 | 100,000 | 64 | 250.0 | 400.0 | 1.60 | 1.20 |" in lines


def test_stored_ids_rows_compare_the_scan_with_the_held_ids(tmp_path):
    path = _write(tmp_path, "stored_ids.jsonl", [
        {"benchmark": "stored_ids", "rows": 1000000, "chunk": 4096, "chunks": 5,
         "first_read_s": 2.5, "scan_s_per_chunk": 1.25, "held_s_per_chunk": 0.005,
         "ratio_scan_over_held": 250.0}])
    assert report.render(path).splitlines()[-1] == "| 1,000,000 | 2.50 | 1.250 | 0.0050 | 250.0 |"
