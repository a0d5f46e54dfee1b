"""convlab plugins of this package (registered through the entry points in pyproject.toml)."""
