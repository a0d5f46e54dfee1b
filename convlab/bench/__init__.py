"""Benchmarks: the harness (:mod:`.harness`: every eligible plugin and cuDNN on every problem of a suite;
the paths of a candidate it checks and times, :mod:`.paths`; interleaved rounds, :mod:`.rounds`; the
float64 references, :mod:`.trusted`), ``algorithm="auto"`` as a user gets it (:mod:`.auto`, its calls
:mod:`.user_calls` and report :mod:`.auto_report`), the cuDNN baseline (:mod:`.baseline`), suites
(:mod:`.suite`, JSON files in ``convlab/suites``), results files and tables (:mod:`.report`,
:mod:`.coverage`) and plots (:mod:`.plot`, needs matplotlib)."""
