"""The ``convlab`` command line: argument parsing and ``main`` in :mod:`.parser`, one function per subcommand in
:mod:`.commands`."""
from .parser import main

__all__ = ["main"]
