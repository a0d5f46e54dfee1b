"""GPU probe of the layout copy every NCHW call of the tensor-core plugin makes (and every channels-last
operand of a plugin that reads NCHW): :func:`convlab.kernels.data.transpose.to_channels_last`, timed per
(tile edge, thread rows) of its tiled transpose, as bandwidth against the H200's ~4.8 TB/s.

    python benchmarks/transpose_bench.py [--out FILE.json]

Each row: the copy (batch, channels, spatial -> padded channels), the element type, the kernel
(element or 16-bit pairs) and its tile, the median of 20 CUDA-event samples after warm-up (thin
launches), and GB/s counting one read and one write of every
element (the padded channels written as zeros count as written bytes).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys

import numpy as np

from convlab import runtime
from convlab.kernels.data import transpose

#: (label, batch, channels, spatial, padded): the seed layer's input at batch 16 and 4, ResNet-50's
#: 64- and 256-channel 56x56 inputs at batch 32, a 3-channel stem padded to 8, and NHWC -> NCHW of
#: a 56x56x64 activation (the transpose back: channels = H*W, spatial = C)
CASES = [("seed b16 16x512x512", 16, 16, 512 * 512, 16), ("seed b4 16x512x512", 4, 16, 512 * 512, 16),
         ("r50 b32 64x56x56", 32, 64, 56 * 56, 64), ("r50 b32 256x56x56", 32, 256, 56 * 56, 256),
         ("stem b32 3x224x224 -> 8", 32, 3, 224 * 224, 8), ("back b32 56x56x64", 32, 56 * 56, 64, 56 * 56)]
TILES = [(32, 4), (32, 8), (64, 4)]  # element kernel; "pairs" rows: the 16-bit pairs kernel
PAIRS = [(64, 8), (64, 4), (32, 8)]


def time_case(batch: int, channels: int, spatial: int, padded: int, dtype: str, tile: int, rows: int,
              pairs: bool = False) -> float:
    """Median ms of one to_channels_last-shaped transpose with the given kernel and tile, each launch
    through the thin path (convlab.runtime.launch), so that Numba's ~50 us launch cost is not timed."""
    from convlab.runtime import launch
    from convlab.call.operands import pointer
    src = runtime.to_device(np.random.default_rng(0).standard_normal(batch * channels * spatial).astype(dtype))
    dst = runtime.full((batch * spatial * padded,), 0, dtype)
    grid = ((spatial + tile - 1) // tile, (padded + tile - 1) // tile, batch)
    U = transpose.U
    if pairs:
        kernel, block = transpose._pairs_kernel(tile, rows), (tile // 2, rows)
        args = (src.view(np.uint32), dst.view(np.uint32), U(channels), U(spatial), U(padded))
    else:
        kernel, block = transpose._transpose_kernel(np.dtype(dtype).name, tile, rows), (tile, rows)
        args = (src, dst, U(channels), U(spatial), U(padded), U(0))
    spans = [pointer(src), pointer(dst)]
    with launch.recording(spans) as recs:
        kernel[grid, block](*args)
    want = np.zeros((batch, spatial, padded), dtype)
    if batch * channels * spatial < 2**26:  # check the small ones
        want[..., :channels] = src.copy_to_host().reshape(batch, channels, spatial).transpose(0, 2, 1)
        assert np.array_equal(dst.copy_to_host().reshape(want.shape), want), "wrong transpose"
    rec = recs[0]
    if rec.thin is None:
        raise RuntimeError("no thin launch recorded")
    return statistics.median(runtime.time_ms(lambda: rec.replay(None, [s[0] for s in spans], 0),
                                             warmup=3, repeat=20))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="JSON file for the rows")
    args = parser.parse_args(argv)
    rows = []
    for label, batch, channels, spatial, padded in CASES:
        for dtype in ("float16", "float32"):
            variants = [(False, t) for t in TILES] + ([(True, t) for t in PAIRS]
                                                     if dtype == "float16" and spatial % 2 == 0 == padded % 2 else [])
            for pairs, (tile, rows_) in variants:
                try:
                    ms = time_case(batch, channels, spatial, padded, dtype, tile, rows_, pairs)
                except Exception as exc:  # a failing variant becomes a row
                    rows.append(dict(case=label, dtype=dtype, pairs=pairs, tile=tile, error=repr(exc)[:300]))
                    print(rows[-1], flush=True)
                    continue
                nbytes = batch * spatial * (channels + padded) * np.dtype(dtype).itemsize
                row = dict(case=label, dtype=dtype, pairs=pairs, tile=tile, rows=rows_, ms=ms,
                           gbps=nbytes / ms / 1e6)
                print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()}),
                      flush=True)
                rows.append(row)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(dict(device=runtime.device_name(), versions=runtime.versions(), rows=rows), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
