"""What the cost model knows about one candidate: the :class:`Features` a (plugin, config) declares on a
problem and a target, through the plugin contract (``Algorithm.cost_features``, ``cost_hints``).

    features(plugin, problem, config, target, workspace_limit) -> Features
        the plugin's ``cost_features`` (the generic view when it raises), then its ``cost_hints``

Built-in and third-party plugins are read the same way: :mod:`convlab.plugin.cost` holds the record, the
generic view and the order above; this module is the cost model's name for it.
"""
from convlab.plugin.cost import (ARITH_CEILING, HINT_FIELDS, KINDS, TENSOR_ARITHS,  # noqa: F401  (re-exported)
                                 WAVE_BLOCKS_PER_SM, Features, generic)
from convlab.plugin.cost import features_of as features

__all__ = ["features", "generic", "Features", "ARITH_CEILING", "HINT_FIELDS", "KINDS", "TENSOR_ARITHS",
           "WAVE_BLOCKS_PER_SM"]
