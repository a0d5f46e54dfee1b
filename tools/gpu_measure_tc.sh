#!/usr/bin/env bash
# One device call measuring the tensor-core plugin through the public op (session 7): memcheck on
# tools/sanitize_cases.py tensor_core (SAN_S s) beside the tensor-core unit tests (no timings), then
# tc_conv_bench on TC_SUITES (burn,burn_b4,resnet50), one run per dtype of TC_DTYPES (float16 float32),
# every op, each plugin's first config (TC_S s a run). SAN_S=0: no memcheck; TEST_PATHS, TESTS_S.  Usage: source .whl/use-wheels.sh && bash tools/gpu_measure_tc.sh
set -u
OUT="${OUT:-gpu-out}"; W=/tmp/convlab-measure; mkdir -p "$OUT" "$W"
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1 || echo "editable install failed"
export CONVLAB_KERNEL_CACHE=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$W/nvidia-smi.txt"
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 ))s] $*"; }
[ "${SAN_S:-200}" -gt 0 ] && ( timeout "${SAN_S:-200}" compute-sanitizer --tool memcheck --report-api-errors no --print-limit 0 \
    python3 tools/sanitize_cases.py tensor_core > "$W/memcheck.log" 2>&1; echo "rc=$?" >> "$W/memcheck.log" ) &
( timeout "${TESTS_S:-150}" python3 -m pytest -n 6 -q -p no:benchmark ${TEST_PATHS:-tests/algorithms/test_tensor_core.py \
    tests/kernels/test_transpose.py} > "$W/tests.log" 2>&1; echo "rc=$?" >> "$W/tests.log" ) &
wait
el "memcheck and tests done"; tail -n 3 "$W/tests.log"; grep -E "ERROR SUMMARY|runs,|=====" "$W/memcheck.log" | head; tail -n 1 "$W/memcheck.log"
for dt in ${TC_DTYPES:-float16 float32}; do  # one run per dtype (each writes its JSON after every row)
  timeout "${TC_S:-300}" python3 benchmarks/tc_conv_bench.py --suites "${TC_SUITES:-burn,burn_b4,resnet50}" \
    --dtypes "$dt" --out "$W/tc_conv_$dt.json" > "$W/tc_conv_$dt.log" 2>&1
  el "tc_conv_bench $dt rc=$?"; grep -A10 "^| op" "$W/tc_conv_$dt.log"; tail -n 2 "$W/tc_conv_$dt.log"
done
tar czf "$OUT/measure.tgz" -C "$W" .
