#!/usr/bin/env bash
# Run the test suite on a real GPU, with the larger hypothesis profile.
# Usage (from the repository root; tools/README.md: installing, a machine without a package index):
#   OUT=DIR bash tools/gpu_tests.sh [pytest args]   (GPU_TEST_WORKERS: xdist workers, 8)
# Writes the JUnit XML and the log under $OUT (or ./gpu-out).
set -uo pipefail
out="${OUT:-gpu-out}"; mkdir -p "$out"
[ -n "${CONVLAB_INSTALLED:-}" ] ||
  python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1 || echo "editable install failed"
python3 -c "import convlab.runtime as r; print('device:', r.device_name(), 'simulator:', r.SIMULATOR, r.versions())"
CONVLAB_HYPOTHESIS_PROFILE="${CONVLAB_HYPOTHESIS_PROFILE:-convlab-gpu}" \
  python3 -m pytest -n "${GPU_TEST_WORKERS:-8}" -v -ra -p no:benchmark --junitxml="$out/gpu-tests.xml" "$@" 2>&1 | tee "$out/gpu-tests.log"
exit "${PIPESTATUS[0]}"
