"""A plugin module whose import fails (a dependency that is not installed)."""
import convlab_test_plugins_missing_dependency  # noqa: F401  (does not exist, on purpose)
