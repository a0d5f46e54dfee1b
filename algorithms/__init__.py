"""Built-in algorithm plugins, installed as ``convlab.algorithms``: one module per algorithm family.

The registry imports every module here whose name does not start with ``_``; a module registers its
plugin classes with ``@convlab.register``. See ``direct.py`` for the smallest complete example.
"""
