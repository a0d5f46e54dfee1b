#!/usr/bin/env bash
# Issue #15 on a machine with two GPUs: the ResNet-50 + Burn tuning sweep with
# --workers 1 and with --workers 2 into separate tuning caches, wall times, picks compared.
# Usage (from the repository root; tools/README.md: installing, a machine without a package index); needs dask.distributed
# (pip install "dask[distributed]", or tools/prepare_gpu_wheels.sh):
#   OUT=DIR bash tools/sweep_x2.sh
# Knobs (environment), defaults sized for ~8 minutes of GPU wall time in all:
#   SUITES   "resnet50 burn"                          suites swept
#   LIMIT    4                                        first K shapes of each suite
#   OPS      forward,dgrad,wgrad
#   DTYPES   float32,float16,bfloat16,float32+high     (float16/bfloat16 wgrad have no plugin: "unsupported")
#   MODE     cold | warm   cold (default): both timed runs start with an empty kernel cache and tuning
#            cache (each compiles what it needs; the 2-worker run shares its compiles through the kernel
#            disk cache). warm: a first 2-worker pass fills a kernel cache that both timed runs copy, then
#            each times with an empty tuning cache (costs one more sweep).
#   TIMEOUT  420   seconds per run (a run cut short is recorded as such)
#   RUNS     "single dual"   the timed runs of this invocation; one of them alone when each should start on
#            a fresh machine (cold alike): the archive keeps that run's cache and wall time, and
#            tools/sweep_compare.py compares the two archives afterwards
# Results: $OUT/sweep_x2.json (walls, ratio, pick comparison), $OUT/sweep_x2.tgz (logs, caches).
set -u
OUT="${OUT:-gpu-out}"; W="${WORK:-${TMPDIR:-/tmp}/convlab-sweep-x2}"
SUITES="${SUITES:-resnet50 burn}"; LIMIT="${LIMIT:-4}"; OPS="${OPS:-forward,dgrad,wgrad}"
DTYPES="${DTYPES:-float32,float16,bfloat16,float32+high}"; MODE="${MODE:-cold}"; TIMEOUT="${TIMEOUT:-420}"
RUNS="${RUNS:-single dual}"
rm -rf "$W"; mkdir -p "$OUT" "$W"
[ -n "${CONVLAB_INSTALLED:-}" ] ||
  python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1 || echo "editable install failed"
python3 -c "import dask, distributed; print('dask', dask.__version__, 'distributed', distributed.__version__)" \
  | tee "$W/versions.txt" || { echo "dask.distributed is missing: install the wheels first"; exit 1; }
nvidia-smi --query-gpu=index,name,driver_version --format=csv | tee -a "$W/versions.txt"
export CONVLAB_KERNEL_CACHE=1
args=(--ops "$OPS" --dtypes "$DTYPES" --limit "$LIMIT" --quiet)
for s in $SUITES; do args+=(--suite "$s"); done
note="suites=$SUITES limit=$LIMIT ops=$OPS dtypes=$DTYPES mode=$MODE"
echo "$note"

run() { # name workers -> prints wall seconds
  local name=$1 n=$2 t0 t1
  mkdir -p "$W/$name"
  if [ "$MODE" = warm ] && [ "$name" != warm ] && [ -d "$W/warm/kernels" ]; then cp -r "$W/warm/kernels" "$W/$name/kernels"; fi
  t0=$(date +%s.%N)
  CONVLAB_CACHE_DIR="$W/$name" timeout "$TIMEOUT" convlab tune "${args[@]}" --workers "$n" > "$W/$name.log" 2>&1
  echo "rc=$?" >> "$W/$name.log"
  t1=$(date +%s.%N)
  python3 -c "print(round($t1 - $t0, 2))"
}
[ "$MODE" = warm ] && echo "warm-up (2 workers): $(run warm 2) s"
walls=()
for name in $RUNS; do
  n=1; [ "$name" = dual ] && n=2
  wall=$(run "$name" "$n"); walls+=("--wall-$name" "$wall"); echo "$name" > "$W/$name.wall"; echo "$wall" >> "$W/$name.wall"
  echo "$name (--workers $n): $wall s; $(tail -3 "$W/$name.log" | head -2 | tr '\n' ' ')"
done
cut=(); for name in $RUNS; do grep -q "^rc=124$" "$W/$name.log" && cut+=("$name"); done  # timed out
if [ "$RUNS" = "single dual" ]; then
  python3 tools/sweep_compare.py --single "$W/single" --dual "$W/dual" "${walls[@]}" \
    --note "$note" --cut "${cut[@]}" -o "$OUT/sweep_x2.json"
fi
tar -czf "$OUT/sweep_x2${RUNS// /_}.tgz" -C "$W" --exclude=kernels .
