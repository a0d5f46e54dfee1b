"""The package version, the one place it is written: ``convlab.__version__`` re-exports it and setup.cfg
reads it (``attr:``). Its own module, so that submodules read it without importing the package."""
__version__ = "0.2.0"
