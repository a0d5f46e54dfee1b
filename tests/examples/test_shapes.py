"""The synthetic shapes dataset (numpy only): deterministic, balanced, ten distinct classes, clear errors."""
from __future__ import annotations

import numpy as np
import pytest

from convlab.examples.shapes import CLASS_NAMES, make_shapes, shape_distance


def test_same_seed_same_arrays_other_seed_other_arrays():
    x0, y0 = make_shapes(50, size=12, seed=3)
    x1, y1 = make_shapes(50, size=12, seed=3)
    x2, y2 = make_shapes(50, size=12, seed=4)
    assert x0.shape == (50, 1, 12, 12) and x0.dtype == np.float32 and y0.dtype == np.int64
    np.testing.assert_array_equal(x0, x1)
    np.testing.assert_array_equal(y0, y1)
    assert not np.array_equal(x0, x2) and not np.array_equal(y0, y2)


@pytest.mark.parametrize("n, classes", [(100, 10), (103, 10), (7, 3), (40, 2)])
def test_labels_are_balanced_and_shuffled(n, classes):
    _, labels = make_shapes(n, size=8, seed=0, num_classes=classes)
    counts = np.bincount(labels, minlength=classes)
    assert counts.sum() == n and len(counts) == classes
    assert counts.max() - counts.min() <= 1
    if n >= 40:
        assert not np.array_equal(labels, np.arange(n) % classes)  # shuffled, not in cyclic order


def test_classes_are_distinct_shapes_and_images_carry_them():
    size, r = 32, 9.0
    rows, cols = np.mgrid[0:size, 0:size].astype(np.float64) - 15.5
    masks = [np.clip(0.5 - shape_distance(k, rows, cols, r), 0, 1) for k in range(len(CLASS_NAMES))]
    for k, mask in enumerate(masks):
        assert 10 < mask.sum() < size * size / 2, CLASS_NAMES[k]  # a shape, not empty, not everything
        for j in range(k):
            assert np.abs(mask - masks[j]).sum() > 10, (CLASS_NAMES[j], CLASS_NAMES[k])
    images, labels = make_shapes(200, size=size, seed=1, noise=0.0)
    assert images.min() >= 0.0 and images.max() <= 1.0
    assert (images.reshape(200, -1).max(axis=1) >= 0.6).all()  # every image holds a drawn shape
    means = np.array([images[labels == k].mean() for k in range(10)])
    assert means.std() > 0.01  # the classes differ in ink, not only in label


@pytest.mark.parametrize("kwargs, word", [({"n": 0}, "n"), ({"n": 4, "size": 4}, "size"),
                                          ({"n": 4, "num_classes": 11}, "num_classes"),
                                          ({"n": 4, "num_classes": 1}, "num_classes"),
                                          ({"n": 4, "noise": -0.1}, "noise")])
def test_bad_arguments_name_the_argument(kwargs, word):
    with pytest.raises(ValueError, match=word):
        make_shapes(**kwargs)
    with pytest.raises(ValueError, match="label"):
        shape_distance(10, np.zeros(1), np.zeros(1), 1.0)
