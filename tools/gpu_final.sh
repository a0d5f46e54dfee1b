#!/usr/bin/env bash
# Check and measure convlab on a real GPU in one run: the steps named, results in $OUT/results.tgz.
# Usage (from the repository root; tools/README.md: installing, a machine without a package index):
#   OUT=DIR bash tools/gpu_final.sh [STEP ...]
# Steps (default: tests sanitize notebooks gemm burn autotune), run in this order:
#   tests      the whole pytest suite on real CUDA, -v so every result is named (TEST_S seconds, 300)
#   sanitize   compute-sanitizer memcheck + racecheck on tools/sanitize_cases.py
#   notebooks  notebooks/run_all.py at full size (figures under notebooks/figures)
#     (tests, sanitize and notebooks take no timings and run in parallel with each other)
#   gemm       benchmarks/gemm_bench.py: 4096^3 fp32 vs cuBLAS
#   burn       convlab bench: Burn suite + batch-4 shape, every op, vs cuDNN
#   autotune   benchmarks/autotune_bench.py (AUTOTUNE_ARGS, default --quick)
#   resnet50   convlab bench: ResNet-50 layers, every op
#   dcgan      convlab bench: DCGAN conv_transpose2d layers
#   probes     the GPU-only checks of the thin launch path and plan replay (tests/core/test_replay_on_device.py)
#              and, with PROBE_TC=1, of the tensor-core plugin at GPU tiles (tests/algorithms/test_tensor_core_gpu.py)
#   overhead   benchmarks/overhead_bench.py: host cost per op call vs PyTorch, empty and raw launches
#   tcgemm     benchmarks/tc_gemm_bench.py: tensor-core GEMM at 4096^3 (fp16, bf16, tf32) vs cuBLAS
#   depthwise  benchmarks/depthwise_bench.py: depthwise layers of MobileNetV2 / EfficientNet-B0 vs cuDNN
#   diag       tools/igemm_launch_diag.py: implicit_gemm run as is / Numba launch / fixed workspace
#   tcconv     benchmarks/tc_conv_bench.py (TC_ARGS, default --quick): the tensor-core conv plugin vs cuDNN
#   transpose  benchmarks/transpose_bench.py: the shared layout-copy kernel per tile, as bandwidth
#   igemmcov   benchmarks/igemm_coverage_bench.py: grouped, odd-channel and strided-dgrad layers
#   torchwrap  benchmarks/torch_wrapper_bench.py: per-call cost of convlab.torch (eager, custom op) vs F.conv2d
#   training   python -m convlab.examples.train_cnn (TRAIN_ARGS): the same CNN on cuDNN and on convlab, seeds
#   coldstart  benchmarks/cold_start_bench.py (COLD_ARGS; COLD_TUNE_CONFIGS: configs timed per plugin): first call of a tuned shape in a new process
#   resnet50b8 convlab bench: ResNet-50 at batch 8, implicit_gemm, kernel vs public op (R8_ARGS)
#   burnig     convlab bench: Burn suites, implicit_gemm only (BURNIG_SUITES)
#   burnop     convlab bench: Burn, BURNOP_PLUGINS (implicit_gemm,im2col,col2im): kernel vs public-op time
#   netbench   convlab bench through the public op: NET_SUITES (mobilenetv2 resnext50 efficientnet_b0),
#              NET_PLUGINS first configs (implicit_gemm,depthwise), NET_S seconds per suite (240)
#   DW_NETS    depthwise step's networks (default mobilenetv2)
#   TEST_PROFILE  hypothesis profile of the tests (convlab-gpu: 60 examples a property); TEST_PATHS: a subset;
#              TEST_N: pytest-xdist workers (8)
# Everything lands in $OUT/results.tgz (plus the test log) so it comes back in one file; with LANE=NAME
# (tools/gpu_two_lanes.sh) the work folder and the archive carry that name.
set -u
OUT="${OUT:-gpu-out}"; LANE="${LANE:-}"; W="${WORK:-${TMPDIR:-/tmp}/convlab-gpu}${LANE:+-$LANE}"
mkdir -p "$OUT" "$W"/{bench,notebooks,sanitizer}
steps=" ${*:-tests sanitize notebooks gemm burn autotune} "
has() { [[ "$steps" == *" $1 "* ]]; }
[ -n "${CONVLAB_INSTALLED:-}" ] ||
  python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1 || echo "editable install failed"
echo "CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-all}" > "$W/nvidia-smi.txt"
nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.mem --format=csv | tee -a "$W/nvidia-smi.txt"
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 ))s] $*"; }
bench() { # name timeout args...
  local name=$1 limit=$2; shift 2
  timeout "$limit" convlab bench "$@" --quiet --out "$W/bench" --name "$name" > "$W/bench/$name.log" 2>&1
  echo "$name rc=$?"; tail -25 "$W/bench/$name.log"
}

probe() { # name timeout command...
  local name=$1 limit=$2; shift 2
  timeout "$limit" "$@" > "$W/bench/$name.log" 2>&1; echo "$name rc=$?"; tail -${TAIL:-30} "$W/bench/$name.log"
}
el "parallel steps (no timings taken)"
if has probes; then
  ( probe replay_checks 150 python3 -m pytest -q -p no:cacheprovider tests/core/test_replay_on_device.py \
      > "$W/probes1.txt" ) &
  [ -n "${PROBE_TC:-}" ] && ( probe tensor_core_checks 240 python3 -m pytest -q -p no:cacheprovider \
      tests/algorithms/test_tensor_core_gpu.py > "$W/probes2.txt" ) &
fi
if has tests; then
  ( CONVLAB_FAILURE_LOG="$W/gpu-test-failures.log" CONVLAB_HYPOTHESIS_PROFILE="${TEST_PROFILE:-convlab-gpu}" timeout "${TEST_S:-300}" python3 -m pytest \
      -n "${TEST_N:-8}" -v -ra -p no:benchmark --durations=30 --junitxml="$W/gpu-tests.xml" ${TEST_PATHS:-} > "$W/gpu-tests.log" 2>&1
    echo "pytest rc=$?" >> "$W/gpu-tests.log" ) &
fi
if has sanitize; then  # the two tools side by side, SANITIZE_S seconds each (120)
  for tool in memcheck racecheck; do
    ( timeout "${SANITIZE_S:-120}" compute-sanitizer --tool $tool --report-api-errors no --print-limit 0 \
        python3 tools/sanitize_cases.py > "$W/sanitizer/$tool.log" 2>&1
      echo "rc=$?" >> "$W/sanitizer/$tool.log" ) &
  done
fi
if has notebooks; then
  ( CONVLAB_CACHE_DIR="$W/nbcache" timeout "${NOTEBOOK_S:-300}" python3 notebooks/run_all.py "$W/notebooks" \
      > "$W/notebooks/run_all.log" 2>&1; echo "rc=$?" >> "$W/notebooks/run_all.log" ) &
fi
wait
el "parallel steps done"
cat "$W"/probes*.txt 2>/dev/null
[ -f "$W/gpu-tests.log" ] && { grep -E "FAILED|ERROR" "$W/gpu-tests.log" | head -30; tail -3 "$W/gpu-tests.log"; }
for f in "$W"/sanitizer/*.log "$W"/notebooks/run_all.log; do [ -f "$f" ] && tail -n 3 "$f"; done

el "benchmarks (alone on the GPU)"
if has gemm; then timeout 60 python3 benchmarks/gemm_bench.py "$W/bench/gemm_4096.json" > "$W/bench/gemm.log" 2>&1
  tail -4 "$W/bench/gemm.log"; fi
has burn && bench burn 240 --suite burn --suite burn_b4 --no-auto --repeat 15 --warmup 3 --max-seconds 0.6
if has autotune; then timeout "${AUTOTUNE_S:-200}" python3 benchmarks/autotune_bench.py ${AUTOTUNE_ARGS:---quick} \
    --out "$W/bench/autotune.json" > "$W/bench/autotune.log" 2>&1; tail -15 "$W/bench/autotune.log"; fi
has resnet50 && bench resnet50 400 --suite resnet50 --no-auto --repeat 10 --warmup 2 --max-seconds 0.4
has dcgan && bench dcgan 120 --suite dcgan --no-auto --repeat 15 --warmup 3 --max-seconds 0.6
has overhead && probe overhead ${OVERHEAD_S:-200} python3 benchmarks/overhead_bench.py ${OVERHEAD_ARGS:-} --out "$W/bench/overhead.json"
has torchwrap && probe torch_wrapper ${TORCHWRAP_S:-120} python3 benchmarks/torch_wrapper_bench.py ${TORCHWRAP_ARGS:-} --out "$W/bench/torch_wrapper.json"
has training && probe training ${TRAIN_S:-240} python3 -m convlab.examples.train_cnn ${TRAIN_ARGS:-} --out "$W/bench/training.json" --figure "$W/bench/training.png"
has coldstart && CONVLAB_TUNE_CONFIGS="${COLD_TUNE_CONFIGS:-${CONVLAB_TUNE_CONFIGS:-}}" probe cold_start ${COLD_S:-240} python3 benchmarks/cold_start_bench.py ${COLD_ARGS:-} --out "$W/bench/cold_start.json"
has resnet50b8 && CONVLAB_KERNEL_CACHE=1 bench resnet50_b8 ${R8_S:-240} --suite resnet50 --batch 8 --plugins implicit_gemm --no-auto --repeat 10 --warmup 2 --max-seconds 0.3 ${R8_ARGS:-}
has tcgemm && probe tcgemm 240 python3 benchmarks/tc_gemm_bench.py --out "$W/bench/tc_gemm.json"
has diag && probe igemm_diag 90 python3 tools/igemm_launch_diag.py
has burnig && bench burn_igemm 150 ${BURNIG_SUITES:---suite burn --suite burn_b4} --no-auto --plugins implicit_gemm --repeat 15 --warmup 3 --max-seconds 0.6
has burnop && bench burn_op ${BURNOP_S:-200} --suite burn --no-auto --plugins ${BURNOP_PLUGINS:-implicit_gemm,im2col,col2im} --repeat 10 --warmup 2 --max-seconds 0.4
if has netbench; then  # NET_SUITES (built-in names) through the public op, NET_PLUGINS first configs, NET_S s per suite
  for s in ${NET_SUITES:-mobilenetv2 resnext50 efficientnet_b0}; do
    bench "net_$s" "${NET_S:-240}" --suite "$s" --no-auto --plugins "${NET_PLUGINS:-implicit_gemm,depthwise}" \
      --repeat 10 --warmup 2 --max-seconds 0.3
  done
fi
has tcconv && probe tcconv ${TCCONV_S:-240} python3 benchmarks/tc_conv_bench.py ${TC_ARGS:---quick} --out "$W/bench/tc_conv.json"
has transpose && probe transpose ${TRANSPOSE_S:-120} python3 benchmarks/transpose_bench.py --out "$W/bench/transpose.json"
has depthwise && probe depthwise ${DW_S:-240} python3 benchmarks/depthwise_bench.py --nets ${DW_NETS:-mobilenetv2} --configs ${DW_CONFIGS:-3} --out "$W/bench/depthwise.json"
has igemmcov && probe igemmcov ${COV_S:-150} python3 benchmarks/igemm_coverage_bench.py --configs ${COV_CONFIGS:-2} --out "$W/bench/igemm_coverage.json"
el "done"
tar czf "$OUT/results${LANE:+-$LANE}.tgz" -C "$W" . && cp "$W/gpu-tests.log" "$OUT/gpu-tests${LANE:+-$LANE}.log" 2>/dev/null
exit 0
