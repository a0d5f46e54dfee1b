"""The SIMT (fp32 / fp64 FMA) tiled GEMM: tile.py, gemm.py, gemm_source.py."""
