"""The vLLM plugin tests: run only in the vLLM virtual environment, with the
todre package installed there (scripts/test_vllm.sh). Checkpoints are built
once under $TODRE_VLLM_CKPT (default: a pytest temporary directory); every
vLLM run of the suite happens in one subprocess (run_llm.py), so vLLM is
imported once."""

import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
       "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_KVCACHE_SPACE": "1"}
SETTINGS = {"plain": None,                         # plugin loaded, pruning off
            "ratio1": {"ratio": 1.0},
            "ratio04": {"ratio": 0.4},
            "keep7": {"keep": 7, "pivot": "random", "seed": 3},
            "shared04": {"ratio": 0.4, "budget": "shared", "group_min": 10}}
# One LLM per (model, deployment). keep7 (the `keep` budget and a seeded
# random pivot: settings that are model-independent) runs on Qwen2.5-VL only,
# where its kept positions are also checked; LLaVA-NeXT's own paths (global
# budget over thumbnail and crops, [CLS] pivot) are covered by ratio04, and
# a budget shared between thumbnail and crops by shared04.
RUNS = [("qwen2_5_vl", n) for n in ("plain", "ratio1", "ratio04", "keep7")] + \
       [("llava_next", n) for n in ("plain", "ratio1", "ratio04", "shared04")]
# bad settings: (id, model, hf_overrides["todre"], environment, text the error names)
BAD = [("ratio_out_of_range", "qwen2_5_vl", {"ratio": 1.5}, None, "1.5 is outside (0, 1]"),
       ("bad_pivot", "llava_next", {"ratio": 0.5, "pivot": "middle"}, None, "pivot"),
       ("bad_objective_env", "qwen2_5_vl", None,
        {"TODRE_VLLM_RATIO": "0.5", "TODRE_VLLM_OBJECTIVE": "max-mean"}, "objective")]


@pytest.fixture(scope="session")
def checkpoints(tmp_path_factory):
    from tiny_checkpoints import build_all
    root = os.environ.get("TODRE_VLLM_CKPT") or str(tmp_path_factory.mktemp("ckpt"))
    return build_all(root)


@pytest.fixture(scope="session")
def session_run(checkpoints, tmp_path_factory):
    """run_llm.py's JSON: plugin loading, every run of RUNS, every BAD case."""
    spec = {"runs": [{"model": checkpoints[m], "name": n, "todre": SETTINGS[n]}
                     for m, n in RUNS],
            "bad": [{"model": checkpoints[m], "name": i, "todre": s, "env": e}
                    for i, m, s, e, _ in BAD]}
    out = str(tmp_path_factory.mktemp("runs") / "session.json")
    env = dict(os.environ, **ENV)
    env.pop("VLLM_PLUGINS", None)
    for k in [k for k in env if k.startswith("TODRE_VLLM_")]:
        if k != "TODRE_VLLM_CKPT":
            del env[k]
    proc = subprocess.run([sys.executable, os.path.join(HERE, "run_llm.py"), out,
                           json.dumps(spec)], env=env, capture_output=True, text=True,
                          timeout=1800)
    assert proc.returncode == 0, proc.stderr[-6000:]
    with open(out) as fh:
        res = json.load(fh)
    print("run_llm.py seconds:", json.dumps({k: round(v, 1) for k, v in res["seconds"].items()}))
    return res


@pytest.fixture(scope="session")
def results(session_run):
    """{model: {run name: result}}."""
    return session_run["runs"]
