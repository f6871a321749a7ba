"""Run every benchmark, print its ratios, and write docs/benchmarks.md: `make bench`.

Each benchmark runs as its own process, one after the other (they measure ratios on the
same machine, so they must not overlap); its JSON lines go to OUT/NAME.jsonl and its
log to OUT/NAME.log. Every ratio a benchmark measured (each against its reference, in
the same run) is printed as it finishes. Then the JSON lines of the benchmarks that
succeeded are copied to docs/results/bench/ and the tables of docs/benchmarks.md and of
the detail pages it links are rendered from them (`--no-docs`: leave the docs alone).
The int8 benchmark needs a trained encoder and PhotoDigits; by default it takes the
demo's (`make demo` first), otherwise pass --model and --data.

    python -m benchmarks.run_all [--out var/bench] [--only serving detectors_10k]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

DEMO_MODEL = Path("var/demo/models/encoder.onnx")
DEMO_DATA = Path("var/demo/photodigits")
DOCS_PAGE = Path("docs/benchmarks.md")
#: the page and the detail pages it links, each with tables rendered from DOCS_RESULTS
DOCS_PAGES = (DOCS_PAGE, Path("docs/results/train-overhead.md"),
              Path("docs/results/archive-scale.md"), Path("docs/results/gpu.md"))
DOCS_RESULTS = Path("docs/results/bench")


def plan(model: Path, data: Path) -> dict[str, list[str]]:
    """Benchmark name -> module arguments, in the order they run."""
    return {
        "serving": ["benchmarks.serving", "--sizes", "224", "32"],
        "threads": ["benchmarks.threads", "--size", "32", "--rounds", "2"],
        "rpc_pool": ["benchmarks.rpc_pool", "--size", "32", "--rounds", "5"],
        "detectors_10k": ["benchmarks.detectors", "--sizes", "10000"],
        "detectors_100k": ["benchmarks.detectors", "--sizes", "100000", "--detectors",
                           "IsoForest", "INNE", "LODA", "OCSVM", "PCA", "KNN", "KDE",
                           "--no-reference", "OCSVM", "KNN", "KDE"],
        "scale": ["benchmarks.scale", "--rows", "10000", "100000"],
        "server_scale": ["benchmarks.server_scale", "--rows", "10000", "100000"],
        "server_memory": ["benchmarks.server_memory"],
        "store_write": ["benchmarks.store_write", "--rows", "100000"],
        "rows_export": ["benchmarks.rows_export", "--rows", "50000", "--rounds", "3"],
        "camera_stats": ["benchmarks.camera_stats", "--cameras", "1", "100", "1000"],
        "train_speed": ["benchmarks.train_speed", "--sizes", "32", "64", "--rounds", "5"],
        "train_overhead": ["benchmarks.train_overhead", "--rounds", "3"],
        "quantized": ["benchmarks.quantized", "--model", str(model), "--data", str(data)],
    }


def print_ratios(name: str, path: Path) -> None:
    """Every ratio (and rank agreement) a benchmark's records hold, one line each."""
    for line in path.read_text().splitlines():
        record = json.loads(line)
        what = ", ".join(f"{k}={record[k]}" for k in ("size", "rows", "cameras", "kind", "clients",
                                                      "detector", "pool", "after_burst",
                                                      "n_reference", "setting", "algorithm")
                         if k in record)
        for key, value in record.items():
            if ("ratio" in key or "spearman" in key or key.endswith("_over_default")
                    or key == "relative_to_erm") and isinstance(value, int | float):
                print(f"[bench] {name} {record['benchmark']} ({what}): {key} = {value:.3f}",
                      flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("var/bench"))
    parser.add_argument("--only", nargs="+", help="run these benchmarks only")
    parser.add_argument("--model", type=Path, default=DEMO_MODEL)
    parser.add_argument("--data", type=Path, default=DEMO_DATA)
    parser.add_argument("--no-docs", action="store_true",
                        help=f"do not copy the results to {DOCS_RESULTS} nor rewrite the pages")
    args = parser.parse_args(argv)
    benchmarks = plan(args.model, args.data)
    unknown = set(args.only or []) - set(benchmarks)
    if unknown:
        parser.error(f"unknown benchmark(s) {sorted(unknown)}; known: {list(benchmarks)}")
    args.out.mkdir(parents=True, exist_ok=True)
    failed: list[str] = []
    succeeded: list[str] = []
    for name, module_args in benchmarks.items():
        if args.only and name not in args.only:
            continue
        if name == "quantized" and not (args.model.is_file() and args.data.is_dir()):
            print(f"[bench] quantized: skipped, no {args.model} or {args.data} "
                  f"(run `make demo` or pass --model/--data)", flush=True)
            continue
        print(f"[bench] {name} ...", flush=True)
        started = time.monotonic()
        with open(args.out / f"{name}.jsonl", "w") as lines, \
                open(args.out / f"{name}.log", "w") as log:
            code = subprocess.call([sys.executable, "-m", *module_args], stdout=lines,
                                   stderr=log)
        print(f"[bench] {name}: exit {code}, {time.monotonic() - started:.0f} s, "
              f"{args.out / name}.jsonl", flush=True)
        if code:
            failed.append(name)
        else:
            print_ratios(name, args.out / f"{name}.jsonl")
            succeeded.append(name)
    if succeeded and not args.no_docs:
        from benchmarks.report import write_docs

        DOCS_RESULTS.mkdir(parents=True, exist_ok=True)
        for name in succeeded:
            shutil.copyfile(args.out / f"{name}.jsonl", DOCS_RESULTS / f"{name}.jsonl")
        for page in DOCS_PAGES:
            done = write_docs(page, DOCS_RESULTS)
            print(f"[bench] {page}: tables rendered from {', '.join(done) or 'nothing'}",
                  flush=True)
    if failed:
        print(f"[bench] failed: {failed} (see their .log files)", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
