#!/usr/bin/env bash
# Two GPUs at once (a machine with two or more GPUs): two step lists of tools/gpu_final.sh, one per GPU.
# Usage (from the repository root; tools/README.md: installing, a machine without a package index):
#   OUT=DIR bash tools/gpu_two_lanes.sh "tests sanitize notebooks" "resnet50 dcgan"
# Each lane sees one GPU (CUDA_VISIBLE_DEVICES), so a benchmark lane has its GPU to itself; put the
# benchmarks in the first lane, which also gets its own CPUs (see below). Archives: $OUT/results-gpu0.tgz and $OUT/results-gpu1.tgz, logs $OUT/lane-gpu*.log.
set -u
OUT="${OUT:-gpu-out}"; mkdir -p "$OUT"; export OUT
[ -n "${CONVLAB_INSTALLED:-}" ] ||
  python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1 || echo "editable install failed"
export CONVLAB_INSTALLED=1
# CPUs apart too (LANE0_CPUS, default the first quarter; LANE1_CPUS, default the rest): the first lane's launches do not queue
# behind the second lane's compiling test workers.
n=$(nproc); pin0=(); pin1=()
if command -v taskset >/dev/null; then
  c0="${LANE0_CPUS:-0-$(( n / 4 - 1 ))}"; pin0=(taskset -c "$c0")
  pin1=(taskset -c "${LANE1_CPUS:-$(( n / 4 ))-$(( n - 1 ))}")
fi
echo "lane gpu0: ${pin0[*]:-no pinning}; lane gpu1: ${pin1[*]:-no pinning}" | tee "$OUT/lanes.txt"
# TEST_PATHS_GPU0 / TEST_PATHS_GPU1: each lane's share of the test suite (default: TEST_PATHS)
CUDA_VISIBLE_DEVICES=0 LANE=gpu0 TEST_PATHS="${TEST_PATHS_GPU0:-${TEST_PATHS:-}}" "${pin0[@]}" \
  bash tools/gpu_final.sh $1 > "$OUT/lane-gpu0.log" 2>&1 &
CUDA_VISIBLE_DEVICES=1 LANE=gpu1 TEST_PATHS="${TEST_PATHS_GPU1:-${TEST_PATHS:-}}" "${pin1[@]}" \
  bash tools/gpu_final.sh $2 > "$OUT/lane-gpu1.log" 2>&1 &
wait
tail -n 40 "$OUT"/lane-gpu*.log
