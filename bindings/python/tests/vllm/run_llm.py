"""Everything the vLLM plugin tests check, in ONE process (importing vLLM
costs about 40 s on the CI machine, so it is paid once), written as JSON.

usage: run_llm.py OUT_JSON SPEC_JSON
SPEC_JSON: {"runs": [{"model": DIR, "name": ..., "todre": {...} | null}, ...],
            "bad":  [{"model": DIR, "name": ..., "todre": {...} | null,
                      "env": {...} | null}, ...]}

In this order:
1. "plugins": vLLM's own plugin loader (vllm.plugins.load_general_plugins, the
   `vllm.general_plugins` entry point of the installed todre package) under
   several VLLM_PLUGINS values; vLLM's state is put back afterwards, so that
2. "runs": vllm.LLM(...) loads the plugin itself (nothing here calls
   todre.vllm.register()), one LLM per run, one after the other;
3. "bad": each bad setting must fail inside LLM(...); the error text is kept.
"""

import gc
import json
import os
import sys
import time
import traceback

import numpy as np
from PIL import Image

IMAGE_SIZES = ((32, 48), (60, 40), (64, 64))     # (width, height), one request each
ARCHS = ("Qwen2_5_VLForConditionalGeneration", "LlavaNextForConditionalGeneration")


def images():
    rng = np.random.default_rng(0)
    return [Image.fromarray(rng.integers(0, 255, (h, w, 3), dtype=np.uint8))
            for w, h in IMAGE_SIZES]


def prompt(model_dir):
    if "qwen" in os.path.basename(model_dir):
        return "w5 w6 <|vision_start|><|image_pad|><|vision_end|> w7 w8 w9"
    return "<s> w5 w6 <image> w7 w8 w9"


def registered():
    """{architecture: "module:Class"} in vLLM's model registry."""
    from vllm import ModelRegistry
    return {a: f"{ModelRegistry.models[a].module_name}:{ModelRegistry.models[a].class_name}"
            for a in ARCHS}


def plugin_loading():
    """What vLLM's loader registers for each VLLM_PLUGINS value (None: unset)."""
    import importlib.metadata as md

    import vllm.plugins
    from vllm import ModelRegistry
    eps = [f"{e.name} = {e.value}" for e in md.entry_points(group="vllm.general_plugins")]
    original = {a: ModelRegistry.models[a] for a in ARCHS}
    out = {"entry_points": eps, "before": registered(), "loaded": {}}
    for value in (None, "todre", "", "some_other_plugin"):
        os.environ.pop("VLLM_PLUGINS", None)
        if value is not None:
            os.environ["VLLM_PLUGINS"] = value
        vllm.plugins.plugins_loaded = False
        vllm.plugins.load_general_plugins()
        out["loaded"][repr(value)] = registered()
        ModelRegistry.models.update(original)
    # back to a fresh process's state: LLM() below loads the plugins itself
    os.environ.pop("VLLM_PLUGINS", None)
    vllm.plugins.plugins_loaded = False
    out["after"] = registered()
    return out


def make_llm(model_dir, settings):
    from vllm import LLM
    return LLM(model=model_dir, dtype="float32", max_model_len=1024, seed=0, max_num_seqs=4,
               enforce_eager=True, gpu_memory_utilization=0.3, enable_prefix_caching=False,
               hf_overrides={} if settings is None else {"todre": settings},
               limit_mm_per_prompt={"image": 1})


def run(model_dir, settings, trace):
    from vllm import SamplingParams
    os.environ["TODRE_VLLM_TRACE"] = trace
    llm = make_llm(model_dir, settings)
    reqs = [{"prompt": prompt(model_dir), "multi_modal_data": {"image": im}}
            for im in images()]
    greedy = SamplingParams(max_tokens=6, temperature=0)
    outs = llm.generate(reqs, greedy, use_tqdm=False)
    # prefill time: one request, one output token, best of 5 (after the warm run)
    one = SamplingParams(max_tokens=1, temperature=0)
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        llm.generate(reqs[2:], one, use_tqdm=False)
        times.append(time.perf_counter() - t0)
    res = {"prompt_token_ids": [list(o.prompt_token_ids) for o in outs],
           "output_token_ids": [list(o.outputs[0].token_ids) for o in outs],
           "prefill_s": min(times), "registered": registered()}
    del llm
    gc.collect()
    return res


def bad(model_dir, settings, env):
    """LLM(...) under a bad setting: must raise; nothing is generated."""
    saved = {k: os.environ.get(k) for k in env or {}}
    os.environ.update(env or {})
    res = {"built": False, "error": None}
    try:
        llm = make_llm(model_dir, settings)
        res["built"] = True
        del llm
    except Exception:       # what LLM() raised, chained causes included
        res["error"] = traceback.format_exc()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        gc.collect()
    return res


def main():
    out, spec = sys.argv[1], json.loads(sys.argv[2])
    t0 = time.perf_counter()
    result = {"plugins": plugin_loading(), "runs": {}, "bad": {}, "seconds": {}}
    result["seconds"]["import+plugins"] = time.perf_counter() - t0
    for r in spec.get("runs", []):
        t0 = time.perf_counter()
        model = os.path.basename(r["model"])
        trace = f"{out}.{model}.{r['name']}.trace"
        if os.path.exists(trace):
            os.remove(trace)
        res = run(r["model"], r.get("todre"), trace)
        # no trace: vLLM's own classes served (the plugin was not loaded); the
        # tests then fail on what is missing instead of this process crashing
        res["trace"] = []
        if os.path.exists(trace):
            with open(trace) as fh:
                res["trace"] = [json.loads(line) for line in fh]
            os.remove(trace)
        result["runs"].setdefault(model, {})[r["name"]] = res
        result["seconds"][f"{model}.{r['name']}"] = time.perf_counter() - t0
    os.environ.pop("TODRE_VLLM_TRACE", None)
    for b in spec.get("bad", []):
        t0 = time.perf_counter()
        result["bad"][b["name"]] = bad(b["model"], b.get("todre"), b.get("env"))
        result["seconds"][f"bad.{b['name']}"] = time.perf_counter() - t0
    with open(out, "w") as fh:
        json.dump(result, fh)


if __name__ == "__main__":
    main()
