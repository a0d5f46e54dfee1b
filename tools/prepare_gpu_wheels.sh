#!/usr/bin/env bash
# Fill .whl/ (git-ignored) with every wheel the GPU image lacks for convlab's GPU calls: numpy 2.4.x
# (numba-cuda breaks on the image's numpy 2.5), ml_dtypes (bfloat16), and Dask with its dependencies
# for the multi-GPU sweeps (tools/sweep_x2.sh, tests/sweep). Run from the project root, then carry .whl
# and start the remote command with `source .whl/use-wheels.sh &&`.
set -euo pipefail
cd "$(dirname "$0")/.."
../shared/gpu/prepare-wheels.sh ml-dtypes==0.6.0 dask distributed cloudpickle toolz partd locket fsspec msgpack \
  sortedcontainers tblib zict tornado psutil click pyyaml jinja2 markupsafe packaging urllib3 \
  importlib_metadata zipp
