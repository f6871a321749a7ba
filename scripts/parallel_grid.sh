#!/usr/bin/env bash
# Run an `envad evaluate` grid with one process per seed (or per pretraining and seed),
# then merge their results into one report directory. Worth it where one process leaves
# the machine idle (a GPU, many cores); each process resumes on its own, so the script
# can be re-run after an interruption.
#
#   scripts/parallel_grid.sh DATA SIZE OUT "0 1 2" [more envad evaluate options...]
#
# e.g. scripts/parallel_grid.sh var/gpu/photodigits-32 32 var/gpu/pd32 "0 1 2" --device cuda
# Per-seed reports go to OUT-sSEED, the merged report to OUT. THREADS (default 4) caps the
# CPU threads of each process. ALGORITHMS="coral irm ..." runs one process per pretraining
# and seed instead (reports in OUT-ALGORITHM-sSEED; leave --algorithms out of the options).
set -euo pipefail
if [ $# -lt 4 ]; then
  sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
data=$1 size=$2 out=$3 seeds=$4
shift 4
algorithms=${ALGORITHMS:-}
groups=()                                 # one entry per process: "ALGORITHM SEED" or "SEED"
for seed in $seeds; do
  if [ -n "$algorithms" ]; then
    for algorithm in $algorithms; do groups+=("$algorithm $seed"); done
  else
    groups+=("$seed")
  fi
done
pids=() dirs=()
for group in "${groups[@]}"; do
  read -r first second <<< "$group"
  if [ -n "${second:-}" ]; then
    dir="$out-$first-s$second" only=(--algorithms "$first" --seeds "$second")
  else
    dir="$out-s$first" only=(--seeds "$first")
  fi
  mkdir -p "$dir"
  # the reference rows (raw pixels, content oracle) are the same for every process:
  # reused when a merged report already holds them (their key is checked on reading)
  [ -f "$out/references.json" ] && cp -n "$out/references.json" "$dir/"
  # no plots: the merged report draws them
  OMP_NUM_THREADS=${THREADS:-4} envad evaluate --data "$data" --size "$size" "${only[@]}" \
      --no-plots --out "$dir" "$@" > "$dir.log" 2>&1 &
  pids+=($!) dirs+=("$dir")
  echo "${group// /, seed }: pid $!, log $dir.log"
done
failed=0
for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
[ "$failed" = 0 ] || { echo "an evaluation failed: see $out-*.log" >&2; exit 1; }
mkdir -p "$out/results"
for dir in "${dirs[@]}"; do cp "$dir"/results/* "$out/results/"; done
# every (algorithm, seed) is now cached in OUT/results: this only writes the merged report
merged=()
[ -n "$algorithms" ] && merged=(--algorithms "$(echo $algorithms | tr ' ' ,)")
envad evaluate --data "$data" --size "$size" --seeds "$(echo $seeds | tr ' ' ,)" \
    "${merged[@]}" --out "$out" "$@"
