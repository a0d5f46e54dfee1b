#!/usr/bin/env bash
# For a GPU machine without a package index: fill .whl/ (git-ignored) with the wheels convlab's GPU runs
# need beyond a CUDA PyTorch image: numpy 2.4.x (numba-cuda 0.30.4 references np.row_stack, which numpy
# 2.5 removed), ml_dtypes (bfloat16), and Dask with its dependencies for the multi-GPU sweeps
# (convlab tune / bench --workers, tests/sweep); and .whl/use-wheels.sh, which installs them there.
# Usage, from the repository root on a machine with the index:
#   tools/prepare_gpu_wheels.sh [EXTRA==VERSION ...]
#   PY_VERSION (default 3.12) and PLATFORM (default x86_64): the GPU machine's Python and architecture
# Then copy the checkout with .whl/ to the GPU machine and start each command with
#   source .whl/use-wheels.sh && python tools/gpu_check.py --resume
# (use-wheels.sh installs into WHEEL_SITE, default ${TMPDIR:-/tmp}/convlab-site, and puts it and the
# checkout first on PYTHONPATH).
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude 2>/dev/null || true
mkdir -p .whl
arch="${PLATFORM:-x86_64}"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "${PY_VERSION:-3.12}" --implementation cp \
  --platform "manylinux_2_28_$arch" --platform "manylinux_2_27_$arch" --platform "manylinux_2_17_$arch" \
  --platform "manylinux2014_$arch" --platform any -d .whl \
  "numpy==2.4.6" ml-dtypes==0.6.0 dask distributed cloudpickle toolz partd locket fsspec msgpack \
  sortedcontainers tblib zict tornado psutil click pyyaml jinja2 markupsafe packaging urllib3 \
  importlib_metadata zipp tqdm platformdirs "$@"
cat > .whl/use-wheels.sh <<'USE'
# Source from the repository root on the GPU machine: source .whl/use-wheels.sh && COMMAND
site="${WHEEL_SITE:-${TMPDIR:-/tmp}/convlab-site}"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" .whl/*.whl || return 1
export PYTHONPATH="$site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
USE
ls -1 .whl
