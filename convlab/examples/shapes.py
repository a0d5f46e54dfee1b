"""A synthetic image-classification dataset of drawn shapes, made with numpy from a seed (no download).

Ten classes, each a shape at a random centre, size and intensity on a noisy background:

    0 disk        1 square       2 triangle     3 plus          4 diagonal cross
    5 ring        6 frame        7 horizontal   8 vertical      9 diagonal stripes

Every shape is a signed distance ``d(y, x)`` in pixels (negative inside); the image is
``intensity * clip(0.5 - d, 0, 1) + noise * N(0, 1)``, so edges are anti-aliased over one pixel and the
same generator draws the classes at 8x8 (coarse, for the CUDA simulator) and 32x32.

    images, labels = make_shapes(n, size=32, seed=0)   # (n, 1, size, size) float32, (n,) int64

Labels are balanced (``n // num_classes`` of each, the remainder going to the first classes) and
shuffled; the same (n, size, seed, num_classes, noise) always gives the same arrays.
"""
from __future__ import annotations

import numpy as np

CLASS_NAMES = ("disk", "square", "triangle", "plus", "diagonal cross", "ring", "frame",
               "horizontal stripes", "vertical stripes", "diagonal stripes")


def _box(dy: np.ndarray, dx: np.ndarray, half: float) -> np.ndarray:
    """Signed distance to an axis-aligned square of half-side ``half`` centred at the origin."""
    return np.maximum(np.abs(dy), np.abs(dx)) - half


def _plus(dy: np.ndarray, dx: np.ndarray, r: float, thick: float) -> np.ndarray:
    """Signed distance to a plus sign of arm length ``r`` and stroke width ``thick``."""
    vertical = np.maximum(np.abs(dx) - thick / 2, np.abs(dy) - r)
    horizontal = np.maximum(np.abs(dy) - thick / 2, np.abs(dx) - r)
    return np.minimum(vertical, horizontal)


def _stripes(u: np.ndarray, period: float) -> np.ndarray:
    """Signed distance to stripes of width ``period / 2`` across the coordinate ``u``."""
    phase = np.mod(u / period, 1.0)
    return np.abs(phase - 0.5) * period - period / 4


def shape_distance(label: int, dy: np.ndarray, dx: np.ndarray, r: float) -> np.ndarray:
    """Signed distance (pixels, negative inside) of class ``label`` with size ``r`` at offsets (dy, dx)."""
    thick = max(1.0, r / 3)
    if label == 0:
        return np.hypot(dy, dx) - r
    if label == 1:
        return _box(dy, dx, 0.8 * r)
    if label == 2:  # equilateral triangle pointing up (image rows grow downwards), circumradius r
        angles = np.pi / 2 + np.array([0.0, 2 * np.pi / 3, 4 * np.pi / 3])  # outward normals of its sides
        return np.max([np.sin(a) * dy + np.cos(a) * dx for a in angles], axis=0) - r / 2
    if label == 3:
        return _plus(dy, dx, r, thick)
    if label == 4:  # the plus turned by 45 degrees
        return _plus((dy + dx) / np.sqrt(2), (dy - dx) / np.sqrt(2), r, thick)
    if label == 5:
        return np.abs(np.hypot(dy, dx) - 0.8 * r) - thick / 2
    if label == 6:
        return np.abs(_box(dy, dx, 0.7 * r)) - thick / 2
    if label in (7, 8, 9):
        u = {7: dy, 8: dx, 9: (dy + dx) / np.sqrt(2)}[label]
        return np.maximum(_stripes(u, max(3.0, r / 1.5)), _box(dy, dx, r))
    raise ValueError(f"label must be in [0, {len(CLASS_NAMES)}), got {label}")


def make_shapes(n: int, size: int = 32, seed: int = 0, num_classes: int = 10, noise: float = 0.1
                ) -> tuple[np.ndarray, np.ndarray]:
    """``n`` images of shapes and their labels: ``(n, 1, size, size)`` float32 and ``(n,)`` int64.

    Each image: one shape of a class in ``[0, num_classes)`` with its centre uniform in the middle 40%
    of the image, size ``r`` uniform in [0.22, 0.36] of ``size``, intensity uniform in [0.6, 1.0], plus
    Gaussian noise of standard deviation ``noise``. Deterministic in all arguments.
    """
    if not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}")
    if not isinstance(size, (int, np.integer)) or size < 6:
        raise ValueError(f"size must be an integer >= 6 (pixels per side), got {size!r}")
    if not 2 <= num_classes <= len(CLASS_NAMES):
        raise ValueError(f"num_classes must be in [2, {len(CLASS_NAMES)}], got {num_classes!r}")
    if noise < 0:
        raise ValueError(f"noise must be >= 0, got {noise!r}")
    rng = np.random.default_rng(seed)
    labels = rng.permutation(np.arange(n) % num_classes).astype(np.int64)
    centres = rng.uniform(0.3 * size, 0.7 * size, (n, 2)) - 0.5  # pixel centres sit at integer + 0.5
    radii = rng.uniform(0.22 * size, 0.36 * size, n)
    intensity = rng.uniform(0.6, 1.0, n)
    rows, cols = np.mgrid[0:size, 0:size].astype(np.float64)
    images = np.empty((n, 1, size, size), np.float32)
    for i in range(n):
        d = shape_distance(int(labels[i]), rows - centres[i, 0], cols - centres[i, 1], radii[i])
        images[i, 0] = intensity[i] * np.clip(0.5 - d, 0.0, 1.0)
    images += (noise * rng.standard_normal(images.shape)).astype(np.float32)
    return images, labels
