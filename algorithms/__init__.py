"""Built-in algorithm plugins, installed as ``convlab.algorithms``: one module (or package) per family.

The registry imports every module and package here whose name does not start with ``_``; a module
registers its plugin classes with ``@convlab.register``. ``_``-prefixed modules hold what several
plugins share (``_columns``: the column-buffer plan of im2col and col2im; ``_unfold``: the unfold
kernel of im2col and the tensor-core wgrad). The GPU building blocks
every kernel family uses live in ``convlab.kernels``. See ``direct.py`` for the smallest complete example.
"""
