"""Example third-party convlab plugins, found through the ``convlab.algorithms`` entry-point group.

``pointwise``: a working 1x1 convolution kernel. ``faulty`` and ``broken_import``: plugins that are broken
on purpose (raising predicate, raising kernel, failing import) for tests/plugin/test_plugin_installed.py
and tests/plugin/test_plugin_entry_points.py.
Importing this package registers nothing; convlab's registry loads each entry point by itself.
"""
