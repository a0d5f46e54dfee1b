"""Text pieces of the benchmark table (:func:`convlab.bench.report.table`): the legend under it, made
from the labels it prints, and wrapping of reasons and errors, which are never cut."""
from __future__ import annotations

import re
import textwrap
from typing import Iterable

#: The note of a simulator run: outputs checked, nothing timed.
SIMULATOR_NOTE = "CUDA simulator: outputs were checked, but no time was measured (times are not meaningful)"
#: The note of a simulator run with ``simulator_wall_clock``: what its times are.
SIMULATOR_WALL_CLOCK_NOTE = ("CUDA simulator: outputs were checked; the ms column is the simulator's wall-clock "
                             "time of one run per candidate, not GPU time (it says nothing about GPU speed)")
#: Width of a reason or error in the table before it wraps onto the next line (nothing is cut).
REASON_WIDTH = 80
_GENERATED = re.compile(r"^(T )?n(\d+) ([\dx]+) w([\dx]+)")
_DIMS = {1: ("C x L", "K x S"), 2: ("C x H x W", "K x R x S"), 3: ("C x D x H x W", "K x T x R x S")}


def simulator_note(wall_clock: bool) -> str:
    """What the times of a simulator run are: none (:data:`SIMULATOR_NOTE`) or its wall clock."""
    return SIMULATOR_WALL_CLOCK_NOTE if wall_clock else SIMULATOR_NOTE


def _axes(match: re.Match) -> int:
    """Spatial axes of a generated label (input C x spatial, weight K x spatial); 0 if they disagree."""
    x, w = match.group(3).split("x"), match.group(4).split("x")
    return len(x) - 1 if len(x) == len(w) else 0


def legend(labels: Iterable[str]) -> str:
    """Printed under every table: how to read the shape labels (explained on the first label of the
    form convlab.bench.suite makes, e.g. 'n1 16x4x4 w16x3x1 p1x0'; suites' own names otherwise) and
    the marks."""
    example = next((m for m in map(_GENERATED.match, labels) if m and _axes(m) in _DIMS), None)
    if example is None:
        shape = ["legend: shape = the suite's name for the layer;"]
    else:
        x_dims, w_dims = _DIMS[_axes(example)]
        shape = [f"legend: shape '{example.string}' = batch N={example.group(2)}, input {x_dims} = "
                 f"{example.group(3)}, weight {w_dims} = {example.group(4)},",
                 "  then, when not the default: s stride, p padding, d dilation, op output_padding (one value",
                 "  per axis when they differ), g groups, +bias; 'T ' marks a conv_transpose."]
    return "\n".join(shape + ["  '*' the plugin 'auto' picks, '<' the fastest; check: ok (within tolerance) / "
                              "wrong / error,", "  with the relative error against the float64 reference."])


def wrap(first: str, text: str, indent: int) -> list[str]:
    """``first + text`` with ``text`` wrapped at :data:`REASON_WIDTH` characters, continuation lines
    indented by ``indent`` spaces."""
    chunks = textwrap.wrap(text, REASON_WIDTH, break_long_words=True, break_on_hyphens=False) or [""]
    return [first + chunks[0]] + [" " * indent + c for c in chunks[1:]]
