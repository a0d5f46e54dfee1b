"""The call path between the public ops and the plugins: each operand adapted once (operands.py), the
launches of a (candidate, problem) recorded and replayed (plan.py), repeated replays as CUDA graphs
(graphs.py)."""
