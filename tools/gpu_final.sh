#!/usr/bin/env bash
# One device call that checks and measures everything (the device tool allows ~10 minutes a call):
#   phase A, in parallel (no timings taken): the test suite on real CUDA, compute-sanitizer memcheck and
#            racecheck on small cases of every new kernel, the notebooks at full size;
#   phase B, alone on the GPU (timings): GEMM vs cuBLAS, the Burn suite for all ops vs cuDNN,
#            the autotuner benchmark, then ResNet-50 forward while time remains.
# Usage (device tool, carry .whl):  source .whl/use-wheels.sh && bash tools/gpu_final.sh
# Everything lands in $OUT/results.tgz (plus the logs) so it comes back in one file.
set -u
OUT="${OUT:-gpu-out}"; W=/tmp/convlab-gpu; mkdir -p "$OUT" "$W"/{bench,notebooks,sanitizer}
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1 || echo "editable install failed"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$W/nvidia-smi.txt"
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 ))s] $*"; }

el "phase A: tests, sanitizer, notebooks (parallel)"
( CONVLAB_HYPOTHESIS_PROFILE="${TEST_PROFILE:-convlab-sim}" timeout "${TEST_S:-300}" python3 -m pytest -n 8 -v -ra \
    -p no:benchmark --junitxml="$W/gpu-tests.xml" > "$W/gpu-tests.log" 2>&1; echo "pytest rc=$?" >> "$W/gpu-tests.log" ) &
( for tool in memcheck racecheck; do
    timeout 60 compute-sanitizer --tool $tool --print-limit 20 python3 tools/sanitize_cases.py \
      > "$W/sanitizer/$tool.log" 2>&1; echo "rc=$?" >> "$W/sanitizer/$tool.log"; done ) &
( CONVLAB_CACHE_DIR="$W/nbcache" timeout 130 python3 notebooks/run_all.py "$W/notebooks" \
    > "$W/notebooks/run_all.log" 2>&1; echo "rc=$?" >> "$W/notebooks/run_all.log" ) &
wait
el "phase A done"; tail -3 "$W/gpu-tests.log"; tail -2 "$W"/sanitizer/*.log

el "phase B: benchmarks (alone on the GPU)"
timeout 35 python3 benchmarks/gemm_bench.py "$W/bench/gemm_4096.json" > "$W/bench/gemm.log" 2>&1
tail -4 "$W/bench/gemm.log"
timeout 140 convlab bench --suite burn --suite burn_b4 --no-auto --quiet --repeat 15 --warmup 3 \
  --max-seconds 0.6 --out "$W/bench" --name burn > "$W/bench/burn.log" 2>&1
tail -60 "$W/bench/burn.log"
timeout 50 python3 benchmarks/autotune_bench.py --quick --max-seconds 25 --out "$W/bench/autotune.json" \
  > "$W/bench/autotune.log" 2>&1; tail -15 "$W/bench/autotune.log"
left=$(( ${TOTAL_S:-330} - ($(date +%s) - t0) ))
if [ "$left" -gt 30 ]; then
  timeout "$left" convlab bench --suite resnet50 --ops forward --no-auto --quiet --repeat 10 --warmup 2 \
    --max-seconds 0.4 --out "$W/bench" --name resnet50-forward > "$W/bench/resnet50.log" 2>&1
  tail -30 "$W/bench/resnet50.log"
fi
el "done"
tar czf "$OUT/results.tgz" -C "$W" . && cp "$W/gpu-tests.log" "$OUT/" 2>/dev/null
