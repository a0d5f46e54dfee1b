"""tests/torch: convlab.torch and the base ops on CPU torch tensors; skipped as a whole without torch."""
import importlib.util

collect_ignore_glob = [] if importlib.util.find_spec("torch") else ["test_*.py"]
