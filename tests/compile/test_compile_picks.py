"""``convlab compile --picks``: the corpus of a first call in the default tuning mode."""
import json
import os
import subprocess
import sys

_PICKS = r"""
import json
from convlab.autotune.cache_entries import eligible
from convlab.autotune.ranking import rank
from convlab.compile import corpus
from convlab.runtime.settings import float32_precision, get_workspace_limit
from convlab.runtime.targets import get, using

target = get("sm_90")
problems = corpus.sample_problems(["implicit_gemm", "depthwise"])
found = corpus.cases(problems, target, dtypes=["float32", "float16"])
kept = corpus.picks(found, target)
rows, firsts = [], {}
for case in kept:
    key = (case.problem.key(), case.precision)
    if key not in firsts:
        with using(target), float32_precision(case.precision):
            first = rank(case.problem, eligible(case.problem, get_workspace_limit()), get_workspace_limit(),
                         target).order[0]
        firsts[key] = [first.plugin.name, first.config.name]
    rows.append({"pick": [case.plugin, case.config.name], "first": firsts[key], "layouts": case.layouts,
                 "id": case.id, "problem": repr(key)})
print(json.dumps({"found": [c.id for c in found], "rows": rows,
                  "problems": len({(c.problem.key(), c.precision) for c in found})}))
"""


def test_picks_keep_each_problems_ranked_first_candidate_in_uniform_layouts():
    env = dict(os.environ, CONVLAB_RUNTIME="compile", NUMBA_ENABLE_CUDASIM="0")
    done = subprocess.run([sys.executable, "-c", _PICKS], env=env, capture_output=True, text=True, check=True)
    got = json.loads(done.stdout.strip().splitlines()[-1])
    rows = got["rows"]
    assert rows and len(rows) < len(got["found"]) / 4
    assert {r["id"] for r in rows} <= set(got["found"])
    assert all(r["pick"] == r["first"] for r in rows)
    assert all(len(set(r["layouts"])) == 1 for r in rows)
    assert any("_epi-" in i for i in got["found"]) and not any("_epi-" in r["id"] for r in rows)
    assert len({r["problem"] for r in rows}) == got["problems"]  # every problem and precision has its pick
