#!/usr/bin/env bash
# Run an `envad evaluate` grid with one process per seed, then merge the per-seed results
# into one report directory. Worth it where one process leaves the machine idle (a GPU,
# many cores); each process resumes on its own, so the script can be re-run after an
# interruption.
#
#   scripts/parallel_grid.sh DATA SIZE OUT "0 1 2" [more envad evaluate options...]
#
# e.g. scripts/parallel_grid.sh var/gpu/photodigits-32 32 var/gpu/pd32 "0 1 2" --device cuda
# Per-seed reports go to OUT-sSEED, the merged report to OUT. THREADS (default 4) caps the
# CPU threads of each process.
set -euo pipefail
if [ $# -lt 4 ]; then
  sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
data=$1 size=$2 out=$3 seeds=$4
shift 4
pids=()
for seed in $seeds; do
  mkdir -p "$out-s$seed"
  OMP_NUM_THREADS=${THREADS:-4} envad evaluate --data "$data" --size "$size" --seeds "$seed" \
      --out "$out-s$seed" "$@" > "$out-s$seed.log" 2>&1 &
  pids+=($!)
  echo "seed $seed: pid $!, log $out-s$seed.log"
done
failed=0
for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
[ "$failed" = 0 ] || { echo "a seed's evaluation failed: see $out-s*.log" >&2; exit 1; }
mkdir -p "$out/results"
for seed in $seeds; do cp "$out-s$seed"/results/* "$out/results/"; done
# every (algorithm, seed) is now cached in OUT/results: this only writes the merged report
envad evaluate --data "$data" --size "$size" --seeds "$(echo $seeds | tr ' ' ,)" \
    --out "$out" "$@"
