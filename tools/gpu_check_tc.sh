#!/usr/bin/env bash
# One device call that checks the tensor-core plugin's kernels after a change (session 7):
#   GPU tests of the changed kernels + tensor_core conformance (convlab-gpu profile) beside
#   compute-sanitizer memcheck then racecheck on tools/sanitize_cases.py tensor_core; then
#   transpose_bench and the seed layer (batch 16 and 4, fp16 and TF32, forward and dgrad, every config).
# Usage (device tool, carry .whl):  source .whl/use-wheels.sh && bash tools/gpu_check_tc.sh
# Limits (seconds): TESTS_S (240 for the two pytest runs together), SAN_S (each tool, 115), SEED_S (150).
set -u
OUT="${OUT:-gpu-out}"; W=/tmp/convlab-check; mkdir -p "$OUT" "$W"
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1 || echo "editable install failed"
export CONVLAB_KERNEL_CACHE=1 CONVLAB_HYPOTHESIS_PROFILE=convlab-gpu
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$W/nvidia-smi.txt"
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 ))s] $*"; }
( timeout "${TESTS_S:-240}" bash -c "python3 -m pytest -n 6 -q -p no:benchmark tests/kernels/test_transpose.py \
    tests/kernels/test_tc_gemm.py tests/kernels/test_splitk.py tests/algorithms/test_tensor_core.py \
    tests/core/test_channels_last.py > $W/tests-kernels.log 2>&1; echo rc=\$? >> $W/tests-kernels.log;
    python3 -m pytest -n 8 -q -p no:benchmark tests/plugin/test_conformance.py -k tensor_core \
    > $W/tests-conformance.log 2>&1; echo rc=\$? >> $W/tests-conformance.log" ) &
( for tool in memcheck racecheck; do
    timeout "${SAN_S:-115}" compute-sanitizer --tool $tool --report-api-errors no --print-limit 0 \
      python3 tools/sanitize_cases.py tensor_core > "$W/$tool.log" 2>&1; echo "rc=$?" >> "$W/$tool.log"
  done ) &
wait
el "tests and sanitizer done"
for f in "$W"/tests-*.log "$W"/memcheck.log "$W"/racecheck.log; do echo "== $f"; grep -E "FAILED|ERROR SUMMARY|hazard|failures" "$f" | head -8; tail -n 2 "$f"; done
timeout 90 python3 benchmarks/transpose_bench.py --out "$W/transpose.json" > "$W/transpose.log" 2>&1; el "transpose rc=$?"
timeout "${SEED_S:-150}" python3 benchmarks/tc_conv_bench.py --suites burn,burn_b4 --shapes 16x512x512 \
  --dtypes float16,float32 --ops forward,dgrad --all-configs --out "$W/seed.json" > "$W/seed.log" 2>&1
el "seed rc=$?"; grep -A8 "^| op" "$W/seed.log"; tail -n 2 "$W/seed.log"
tar czf "$OUT/check.tgz" -C "$W" .
