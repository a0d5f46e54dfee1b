"""convlab.kernels.simt.tile: one Tile for every GEMM-like family; geometry and validation messages."""
from __future__ import annotations

import pytest

from convlab import Config
from convlab.algorithms.implicit_gemm import common as igemm
from convlab.kernels.simt.gemm_source import check_tile as gemm_rules
from convlab.kernels.simt.tile import PAD, Tile


def test_geometry_and_config_round_trip():
    tile = Tile(128, 64, 8, 8, 4)
    assert (tile.nt_m, tile.nt_n, tile.threads, tile.gm, tile.gn) == (16, 16, 256, 4, 4)
    assert tile.shared_bytes(4) == 2 * 8 * (128 + 64 + 2 * PAD) * 4 == 2 * tile.shared_bytes(2)
    assert tile.name == "128x64x8/8x4"
    assert tile.config() == {"BM": 128, "BN": 64, "BK": 8, "TM": 8, "TN": 4}
    assert Tile.from_config(Config(tile.config())) == tile
    assert Tile(16, 16, 8, 2, 2).lanes_m((8, 4)) == 8  # 8 x 8 threads: 8 x 4 lanes
    with pytest.raises(ValueError, match="no warp layout fits a 2 x 2 thread grid"):
        Tile(4, 4, 8, 2, 2).lanes_m((4, 2))
    with pytest.raises(ValueError, match="lacks 'TN'"):
        Tile.from_config({"BM": 1, "BN": 1, "BK": 1, "TM": 1})


@pytest.mark.parametrize("tile, itemsize, message", [
    (Tile(16, 16, 8, 0, 2), 4, "tile tm must be a positive int, got 0"),
    (Tile(16, 16, 8, 2.0, 2), 4, "tile tm must be a positive int, got 2.0"),
    (Tile(16, 16, 8, 3, 2), 4, "tile tm and tn must be 1, 2, 4 or 8, got 3, 2"),
    (Tile(16, 12, 8, 2, 8), 4, "tile bm=16, bn=12 must be multiples of tm=2, tn=8"),
    (Tile(128, 128, 8, 2, 2), 4, "tile 128x128x8/2x2 has 4096 threads per block; must be 1..1024"),
    (Tile(256, 256, 32, 8, 8), 4, "needs 133120 bytes of shared memory for 4-byte elements, over 48 KiB"),
    (Tile(128, 128, 16, 8, 8), 8, "needs 67584 bytes of shared memory for 8-byte elements, over 48 KiB"),
])
def test_common_rules_name_the_broken_one(tile, itemsize, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(".", r"\.")):
        tile.validate(itemsize)


def test_family_rules():
    assert Tile(128, 128, 16, 8, 8).validate(4) == gemm_rules(Tile(128, 128, 16, 8, 8))
    with pytest.raises(ValueError, match="tile bk=64 must be <= 32"):
        gemm_rules(Tile(16, 16, 64, 2, 2))
    gemm_rules(Tile(12, 16, 4, 2, 2))  # the explicit GEMM takes any sizes ...
    for tile, message in [(Tile(12, 16, 8, 2, 2), "tile bm=12 must be a power of two"),  # ... not this one
                          (Tile(16, 16, 4, 2, 2), "tile bk=4 must be a multiple of 8"),
                          (Tile(16, 16, 8, 4, 4), "has 16 threads per block; must be a multiple of 32 "
                                                  "in 32..512"),
                          (Tile(256, 64, 8, 4, 4), "has 1024 threads per block")]:
        with pytest.raises(ValueError, match=message):
            igemm.validate(tile)
    assert igemm.validate(Tile(128, 128, 8, 8, 8)).threads == 256
