"""Benchmarks: the harness (:mod:`.harness`: every eligible plugin and cuDNN on every problem of a
suite), the cuDNN baseline (:mod:`.baseline`), suites (:mod:`.suite`, JSON files in ``convlab/suites``),
results files and tables (:mod:`.report`) and plots (:mod:`.plot`, needs matplotlib)."""
