"""Reusable GPU kernel building blocks (tensor-core intrinsics, tiles, generated sources, GEMM cores)."""
