"""``python -m convlab.modelfit``: the cost model's refit (:mod:`convlab.modelfit.fit`)."""
import sys

from convlab.modelfit.fit import main

sys.exit(main())
