"""The offline fit of the autotuner's cost model: read the committed GPU results, fit the constants of
:mod:`convlab.autotune.costmodel`, judge the fit leaving one network out, write the model file and its
report. ``python -m convlab.modelfit --help``; the runtime choice that loads the model is
:mod:`convlab.autotune`.

Modules: :mod:`.readers` (the result file formats), :mod:`.measured` (which rows are used),
:mod:`.fitting` (the robust fit in log space), :mod:`.evaluate` (regret and top-k, leave one network out),
:mod:`.report` (the Markdown report), :mod:`.fit` (the command).
"""
