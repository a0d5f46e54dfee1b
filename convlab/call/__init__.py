"""The call path between the public ops and the plugins: each operand adapted once into a record
(operands.py), the one entry that runs a (plugin, config) candidate (candidate.py), the launches of a
(candidate, problem) recorded and kept per call signature (plan.py) and replayed (replay.py), repeated
replays as CUDA graphs (graphs.py)."""
