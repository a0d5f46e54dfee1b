#!/usr/bin/env bash
# One run on a GPU: the steps named in STEPS (space-separated, in order), each under its
# own time limit, results under $OUT. Usage (from the repository root; tools/README.md: installing, a machine without a package index):
#   OUT=DIR STEPS="gemm conv" bash tools/gpu_steps.sh
# Steps:
#   gemm   tc_gemm_bench at 4096^3: GEMM_ITYPES (tf32 f16), GEMM_CONFIGS (indices), GEMM_ROUND (trunc cvt add)
#   probe  tc_gemm_bench at PROBE_SIZE (M N K: a convolution's GEMM, default ResNet's 64x112x112 w128x3x3
#          at batch 16), fp16, configs 0 1: the pipeline alone against the implicit GEMM's kernel
#   conv   tc_conv_bench, one run per dtype of CONV_DTYPES on CONV_SUITES, CONV_OPS (CONV_S s a run);
#          CONV_SHAPES: labels to keep (comma list, may hold spaces); CONV_ARGS: more options (no spaces)
#   tests  pytest TEST_PATHS (convlab-gpu hypothesis profile; TEST_K: a -k expression), TESTS_S s;
#          TESTS_BG=1: in the background (beside the next steps, on their CPUs and GPU: for correctness
#          runs, not beside timings that matter), waited for at the end
#   san    compute-sanitizer SAN_TOOLS (memcheck racecheck) on tools/sanitize_cases.py SAN_PLUGINS (tensor_core),
#          SAN_S s each (SANITIZE_DTYPES / _SHAPES / _CONFIGS: the script's); SAN_BG=1: in the background
#   bench  convlab bench --no-auto on BENCH_SUITES (mobilenetv2 resnext50 efficientnet_b0: issue 13's;
#          an entry SUITE:OPS runs only those ops of it, e.g. burn:dgrad), BENCH_ARGS (e.g. --plugins
#          depthwise,implicit_gemm), BENCH_S s in all; one process per entry in turn, candidates ranked and
#          compared with cuDNN by their time through the public op ('op ms'); files $OUT/<entry>.json and
#          .csv, the logs in $OUT/bench.log; BENCH_PRECOMPILE=S:
#          first one untimed process per entry side by side (S s at most) that compiles the kernels into
#          the disk cache; background steps (TESTS_BG, SAN_BG) are waited for before the timed runs
#   overhead  benchmarks/overhead_bench.py: OVH_ALG (implicit_gemm), OVH_LAYER (N,C,H,W,K,R[,G[,S]]), OVH_DTYPE,
#          OVH_ARGS (e.g. --profile), OVH_TAG (file suffix), OVH_S s
#   nb     notebooks/run_all.py --only 01 (the precision figure), NB_S s
#   verify side by side, VERIFY_S s each: memcheck (fp16, bf16, TF32; every sanitize_cases shape, one config),
#          racecheck (fp16, TF32; shapes 0 1 3 4, one config) and pytest VERIFY_TESTS (convlab-gpu profile)
set -u
OUT="${OUT:-gpu-out}"; mkdir -p "$OUT"
[ -n "${CONVLAB_INSTALLED:-}" ] ||
  python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1 || echo "editable install failed"
export CONVLAB_KERNEL_CACHE=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/nvidia-smi.txt"
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 ))s] $*"; }
for step in ${STEPS:-gemm conv}; do
  case $step in
  gemm)
    timeout "${GEMM_S:-200}" python3 benchmarks/tc_gemm_bench.py --itypes ${GEMM_ITYPES:-tf32 f16} \
      --configs ${GEMM_CONFIGS:-0 3 5} --tf32-round ${GEMM_ROUND:-trunc} --out "$OUT/tc_gemm.json" > "$OUT/tc_gemm.log" 2>&1
    el "gemm rc=$?"; grep -A30 "^itype" "$OUT/tc_gemm.log" | head -20 ;;
  verify)
    ( SANITIZE_DTYPES=float16,bfloat16,tf32 SANITIZE_CONFIGS=1 timeout "${VERIFY_S:-200}" compute-sanitizer \
        --tool memcheck --report-api-errors no --print-limit 0 python3 tools/sanitize_cases.py tensor_core \
        > "$OUT/memcheck.log" 2>&1; echo "rc=$?" >> "$OUT/memcheck.log" ) &
    ( SANITIZE_DTYPES=float16,tf32 SANITIZE_SHAPES=0,1,3,4 SANITIZE_CONFIGS=1 timeout "${VERIFY_S:-200}" \
        compute-sanitizer --tool racecheck --report-api-errors no --print-limit 0 python3 tools/sanitize_cases.py \
        tensor_core > "$OUT/racecheck.log" 2>&1; echo "rc=$?" >> "$OUT/racecheck.log" ) &
    ( CONVLAB_HYPOTHESIS_PROFILE=convlab-gpu timeout "${VERIFY_S:-200}" python3 -m pytest -n 6 -q -p no:benchmark \
        -rfE ${VERIFY_TESTS:-tests/plugin/test_conformance.py -k tensor_core} > "$OUT/verify-tests.log" 2>&1; \
        echo "rc=$?" >> "$OUT/verify-tests.log" ) &
    wait
    el "verify done"
    for f in memcheck racecheck; do grep -E "ERROR SUMMARY|RACECHECK SUMMARY|runs,|rc=" "$OUT/$f.log" | tail -n 3; done
    grep -E "FAILED|ERROR|passed|failed|rc=" "$OUT/verify-tests.log" | tail -n 8 ;;
  probe)
    timeout "${PROBE_S:-90}" python3 benchmarks/tc_gemm_bench.py --itypes f16 --configs 0 1 \
      --size ${PROBE_SIZE:-200704 128 576} --out "$OUT/tc_gemm_probe.json" > "$OUT/tc_gemm_probe.log" 2>&1
    el "probe rc=$?"; grep -A6 "^itype" "$OUT/tc_gemm_probe.log" ;;
  conv)
    for dt in ${CONV_DTYPES:-float16}; do
      timeout "${CONV_S:-300}" python3 benchmarks/tc_conv_bench.py --suites "${CONV_SUITES:-burn,resnet50}" \
        --dtypes "$dt" --ops "${CONV_OPS:-forward,dgrad,wgrad}" ${CONV_SHAPES:+--shapes "$CONV_SHAPES"} ${CONV_ARGS:-} \
        --out "$OUT/tc_conv_$dt.json" \
        > "$OUT/tc_conv_$dt.log" 2>&1
      el "tc_conv_bench $dt rc=$?"; grep -A8 "^| op" "$OUT/tc_conv_$dt.log"; tail -n 2 "$OUT/tc_conv_$dt.log"
    done ;;
  tests)
    run_tests() {
      CONVLAB_HYPOTHESIS_PROFILE=convlab-gpu timeout "${TESTS_S:-240}" python3 -m pytest -n 8 -q -p no:benchmark \
        ${TEST_PATHS:-tests} ${TEST_K:+-k "$TEST_K"} > "$OUT/tests.log" 2>&1
      el "tests rc=$?"; grep -E "FAILED|ERROR" "$OUT/tests.log" | head -20; tail -n 3 "$OUT/tests.log"
    }
    if [ -n "${TESTS_BG:-}" ]; then run_tests & else run_tests; fi ;;
  san)
    run_san() {
      for tool in ${SAN_TOOLS:-memcheck racecheck}; do
        timeout "${SAN_S:-120}" compute-sanitizer --tool $tool --report-api-errors no --print-limit 0 \
          python3 tools/sanitize_cases.py ${SAN_PLUGINS:-tensor_core} > "$OUT/$tool.log" 2>&1
        el "$tool rc=$?"; grep -E "ERROR SUMMARY|hazard|runs" "$OUT/$tool.log" | tail -n 3
      done
    }
    if [ -n "${SAN_BG:-}" ]; then run_san & else run_san; fi ;;
  bench)
    entries="${BENCH_SUITES:-mobilenetv2 resnext50 efficientnet_b0}"
    ops_of() { case $1 in *:*) echo "--ops ${1#*:}" ;; esac; }
    name_of() { echo "$1" | tr ':,' '__'; }  # burn:dgrad -> burn_dgrad
    if [ -n "${BENCH_PRECOMPILE:-}" ]; then
      pids=""
      for e in $entries; do
        timeout "$BENCH_PRECOMPILE" convlab bench --suite ${e%%:*} $(ops_of $e) --no-auto --no-torch --repeat 1 \
          --warmup 0 --max-seconds 0 ${BENCH_ARGS:-} --out "${TMPDIR:-/tmp}/convlab-precompile" --name "$(name_of $e)" --quiet \
          > "${TMPDIR:-/tmp}/convlab-precompile-$(name_of $e).log" 2>&1 &
        pids="$pids $!"
      done
      wait $pids; el "precompiled"
    fi
    wait; el "background steps done"  # TESTS_BG / SAN_BG: nothing else on the GPU while it is timed
    end=$(( $(date +%s) + ${BENCH_S:-300} ))
    for e in $entries; do
      left=$(( end - $(date +%s) )); [ $left -gt 5 ] || { el "bench: no time left for $e"; continue; }
      timeout $left convlab bench --suite ${e%%:*} $(ops_of $e) --no-auto --repeat 10 --warmup 3 \
        --max-seconds 0.4 ${BENCH_ARGS:-} --out "$OUT" --name "$(name_of $e)" --quiet >> "$OUT/bench.log" 2>&1
      el "bench $e rc=$?"
    done
    grep -A12 "geometric mean" "$OUT/bench.log" | head -60 ;;
  overhead)
    timeout "${OVH_S:-150}" python3 benchmarks/overhead_bench.py --algorithm "${OVH_ALG:-implicit_gemm}" \
      ${OVH_LAYER:+--layer "$OVH_LAYER"} --dtype "${OVH_DTYPE:-float32}" ${OVH_ARGS:-} \
      --out "$OUT/overhead${OVH_TAG:-}.json" > "$OUT/overhead${OVH_TAG:-}.log" 2>&1
    el "overhead${OVH_TAG:-} rc=$?"; tail -n 12 "$OUT/overhead${OVH_TAG:-}.log" ;;
  nb)
    timeout "${NB_S:-240}" python3 notebooks/run_all.py "$OUT/notebooks" --only 01 > "$OUT/notebooks.log" 2>&1
    el "notebook rc=$?"; tail -n 5 "$OUT/notebooks.log" ;;
  *) echo "unknown step $step" ;;
  esac
done
wait  # background tests (TESTS_BG)
el "done"
