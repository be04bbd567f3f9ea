#!/usr/bin/env python3
"""End-to-end benchmark: Hugging Face generate() of LLaVA-NeXT and Qwen2.5-VL
with random weights, without ToDRE, with stage 1 and with both stages.

    TODRE_LIBRARY=build/libtodre.so.1 python3 bench/bench_e2e.py [--models llava qwen]
        [--reps 3] [--new-tokens 16] [--threads 2]

The models are built from configs (nothing is downloaded, as in
bindings/python/tests/hf): the vision towers have the real shapes
(LLaVA-NeXT: CLIP-L/14 at 336 px, 24 layers, AnyRes with a 2 x 2 grid plus the
thumbnail, 2880 patch tokens, 2928 with the image-newline tokens; Qwen2.5-VL:
its 32-layer, 1280-wide windowed ViT), the language models are scaled down to
what 2 cores run in a few minutes (--layers, --width). The prompt is
[bos, system x 34, image placeholders, text x 40], token ids given directly.

For every model the three settings run interleaved (a, b, c, a, b, c, ...)
after one warm-up call, so each ratio compares runs taken side by side:

  (a) the plain model;
  (b) todre.hf.enable(ratio=0.1, stage2=False);
  (c) todre.hf.enable(ratio=0.1, tau=--tau): stage 2 at the default probe layer
      floor(7L/8). With random weights the text keeps attending to the image
      (the observed alpha ratios are printed), so the default tau 0.1 never
      drops: tau is set above the observed ratios to FORCE the drop, which
      measures what a drop saves, not whether a trained model would drop.

Per call: prefill = time to first token (wall time from the call to the first
logits, vision tower and selection included), decode = tokens/s over the
remaining steps; the vision tower's and the language model's prefill forward
are timed with hooks, and libtodre's calls (todre.select_batch and every
todre.Relevance method) by wrapping them. Medians over --reps.
"""
import argparse
import os
import platform
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "2")      # libtodre's OpenMP, before it loads
sys.path.insert(0, os.path.join(ROOT, "bindings", "python", "src"))

import torch  # noqa: E402
from transformers import LogitsProcessor, LogitsProcessorList  # noqa: E402

import todre  # noqa: E402
import todre.hf  # noqa: E402


# -- timing of libtodre calls -----------------------------------------------------
class LibClock:
    """Wall time spent inside libtodre's Python entry points (ctypes calls and
    their argument marshalling), split into stage 1 and stage 2."""

    def __init__(self):
        self.t = {"select": 0.0, "relevance": 0.0}
        self._wrap(todre, "select_batch", "select")
        for name in ("__init__", "set_types", "observe_qk", "observe_probs", "ratios",
                     "keep_positions", "drop_layer", "is_probe", "close"):
            self._wrap(todre.Relevance, name, "relevance")

    def _wrap(self, owner, name, key):
        fn = getattr(owner, name)
        clock = self

        def timed(*a, **kw):
            sync()      # on a GPU: the work queued before is not libtodre's
            t0 = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                sync()  # ... and libtodre's own queued work is
                clock.t[key] += time.perf_counter() - t0
        setattr(owner, name, timed)

    def reset(self):
        for k in self.t:
            self.t[k] = 0.0


class ForwardClock:
    """Time of the first forward of a module in one generate() call (the prefill
    forward: for the language model, later forwards are decoding steps)."""

    def __init__(self, module):
        self.first = None
        self._t0 = None
        module.register_forward_pre_hook(self._pre)
        module.register_forward_hook(self._post)

    def _pre(self, *_):
        if self.first is None:
            sync()
            self._t0 = time.perf_counter()

    def _post(self, *_):
        if self.first is None and self._t0 is not None:
            sync()
            self.first = time.perf_counter() - self._t0

    def reset(self):
        self.first, self._t0 = None, None


class Stamps(LogitsProcessor):
    """Wall-clock time of every step's logits (step 0 = the prefill)."""

    def __init__(self):
        self.t = []

    def __call__(self, input_ids, scores):
        sync()
        self.t.append(time.perf_counter())
        return scores


# -- models -------------------------------------------------------------------------
SYSTEM, TEXT = 34, 40
DEVICE = "cpu"

# --preset 7b: the language models of LLaVA-NeXT-7B (Vicuna-7B) and
# Qwen2.5-VL-7B (layers, width, ffn, heads, kv heads), for a GPU.
PRESETS = {"llava": (32, 4096, 11008, 32, 32), "qwen": (28, 3584, 18944, 28, 4)}


def sync():
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def llm_dims(args, model):
    if args.preset == "7b":
        layers, width, ffn, heads, kv = PRESETS[model]
    else:
        layers, width, ffn = args.layers, args.width, args.ffn
        heads = width // 64
        kv = max(1, heads // 2)
    return dict(hidden_size=width, intermediate_size=ffn, num_hidden_layers=layers,
                num_attention_heads=heads, num_key_value_heads=kv)


def place(model, inputs, args):
    """The model and its inputs on --device in --dtype (token ids stay int64)."""
    dt = getattr(torch, args.dtype)
    model = model.to(dt)
    inputs = {k: (v.to(DEVICE, dt) if v.is_floating_point() else v.to(DEVICE))
              for k, v in inputs.items()}
    return model, inputs


def llava_next(args):
    from transformers import (CLIPVisionConfig, LlamaConfig, LlavaNextConfig,
                              LlavaNextForConditionalGeneration)
    torch.manual_seed(0)
    vision = CLIPVisionConfig(hidden_size=1024, intermediate_size=4096, num_hidden_layers=24,
                              num_attention_heads=16, image_size=336, patch_size=14,
                              projection_dim=768, hidden_act="quick_gelu")
    text = LlamaConfig(**llm_dims(args, "llava"), vocab_size=32064, max_position_embeddings=4096,
                       bos_token_id=1, eos_token_id=2, pad_token_id=0)
    cfg = LlavaNextConfig(vision_config=vision, text_config=text, image_token_id=32000,
                          image_grid_pinpoints=[[336, 672], [672, 336], [672, 672],
                                                [1008, 336], [336, 1008]],
                          vision_feature_layer=-2, vision_feature_select_strategy="default")
    for c in (cfg, cfg.text_config, cfg.vision_config):
        c._attn_implementation = "sdpa"
    with torch.device(DEVICE):
        model = LlavaNextForConditionalGeneration(cfg).eval()
    model.generation_config.pad_token_id = 0
    # a 672 x 672 image: 2 x 2 crops of 336 px + the thumbnail, no unpadding
    g = torch.Generator().manual_seed(1)
    pv = torch.randn(1, 5, 3, 336, 336, generator=g)
    sizes = torch.tensor([[672, 672]])
    n_img = 576 + 48 * 48 + 48          # thumbnail + crop grid + one newline per row
    ids = _prompt(g, 32000, n_img, 32000)
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids),
              "pixel_values": pv, "image_sizes": sizes}
    model, inputs = place(model, inputs, args)
    return model, inputs, model.model.vision_tower, n_img


def qwen2_5_vl(args):
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration
    torch.manual_seed(0)
    dims = llm_dims(args, "qwen")
    half = dims["hidden_size"] // dims["num_attention_heads"] // 2   # rotary pairs, t:h:w = 2:3:3
    section = [half // 4, half * 3 // 8, half - half // 4 - half * 3 // 8]
    cfg = Qwen2_5_VLConfig(
        vision_config=dict(depth=32, hidden_size=1280, intermediate_size=3420, num_heads=16,
                           out_hidden_size=dims["hidden_size"], patch_size=14, spatial_merge_size=2,
                           temporal_patch_size=2, window_size=112,
                           fullatt_block_indexes=[7, 15, 23, 31], in_channels=3),
        text_config=dict(**dims, vocab_size=151936, max_position_embeddings=8192,
                         bos_token_id=151643, eos_token_id=151645, pad_token_id=151643,
                         rope_scaling={"type": "mrope", "mrope_section": section}),
        image_token_id=151655, video_token_id=151656, vision_start_token_id=151652,
        vision_end_token_id=151653, bos_token_id=151643, eos_token_id=151645,
        pad_token_id=151643)
    for c in (cfg, cfg.text_config, cfg.vision_config):
        c._attn_implementation = "sdpa"
    with torch.device(DEVICE):
        model = Qwen2_5_VLForConditionalGeneration(cfg).eval()
    model.generation_config.pad_token_id = 151643
    side = args.qwen_px // 14
    g = torch.Generator().manual_seed(1)
    thw = torch.tensor([[1, side, side]])
    pv = torch.randn(side * side, 3 * 2 * 14 * 14, generator=g)
    n_img = side * side // 4
    ids = _prompt(g, 151655, n_img, 150000, start=151652, end=151653)
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids),
              "mm_token_type_ids": (ids == 151655).int(),
              "pixel_values": pv, "image_grid_thw": thw}
    model, inputs = place(model, inputs, args)
    return model, inputs, model.model.visual, n_img


def _prompt(g, image_id, n_img, text_vocab, start=None, end=None):
    sys_ids = torch.randint(3, text_vocab, (SYSTEM,), generator=g).tolist()
    txt_ids = torch.randint(3, text_vocab, (TEXT,), generator=g).tolist()
    img = ([start] if start is not None else []) + [image_id] * n_img + \
        ([end] if end is not None else [])
    return torch.tensor([[1] + sys_ids + img + txt_ids])


# -- one model ------------------------------------------------------------------------
SETTINGS = ("a", "b", "c")
LABEL = {"a": "(a) no ToDRE", "b": "(b) stage 1, ratio 0.1",
         "c": "(c) stage 1 + stage 2 (drop forced)"}


def configure(model, setting, args):
    todre.hf.disable(model)
    if setting == "b":
        todre.hf.enable(model, ratio=0.1, stage2=False)
    elif setting == "c":
        todre.hf.enable(model, ratio=0.1, tau=args.tau)


def one_call(model, inputs, setting, args, lib, vis, lm):
    configure(model, setting, args)
    lib.reset()
    vis.reset()
    lm.reset()
    stamps = Stamps()
    t0 = time.perf_counter()
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=args.new_tokens,
                             min_new_tokens=args.new_tokens, do_sample=False,
                             logits_processor=LogitsProcessorList([stamps]))
    t_end = time.perf_counter()
    assert out.shape[1] == inputs["input_ids"].shape[1] + args.new_tokens, out.shape
    steps = len(stamps.t) - 1
    rec = {"prefill": stamps.t[0] - t0,
           "decode_tps": steps / (stamps.t[-1] - stamps.t[0]) if steps > 0 else float("nan"),
           "total": t_end - t0, "vision": vis.first or 0.0, "llm": lm.first or 0.0,
           "select": lib.t["select"], "relevance": lib.t["relevance"]}
    st = todre.hf.stats(model)
    rec["kept"] = st.get("kept_tokens")
    rec["drop_layer"] = st.get("drop_layer")
    rec["ratios"] = st.get("ratios")
    todre.hf.disable(model)
    return rec


def run_model(name, build, args, lib):
    t_build = time.perf_counter()
    model, inputs, tower, n_img = build(args)
    lm = model.model.language_model
    vis, lmc = ForwardClock(tower), ForwardClock(lm)
    L = len(lm.layers)
    probe = L * 7 // 8
    params = sum(p.numel() for p in model.parameters())
    tc = lm.config
    print(f"\n== {name}: {params / 1e6:.0f} M parameters, LLM {L} layers x {tc.hidden_size} "
          f"(ffn {tc.intermediate_size}, heads {tc.num_attention_heads}/{tc.num_key_value_heads}), prompt {inputs['input_ids'].shape[1]} tokens of which "
          f"{n_img} visual; built in {time.perf_counter() - t_build:.1f} s", flush=True)

    t = time.perf_counter()
    w = one_call(model, inputs, "c", args, lib, vis, lmc)          # warm-up
    print(f"warm-up (c): {time.perf_counter() - t:.1f} s, kept {w['kept']}, "
          f"drop layer {w['drop_layer']}, ratios {w['ratios']}", flush=True)
    runs = {s: [] for s in SETTINGS}
    for r in range(args.reps):
        for s in SETTINGS:
            rec = one_call(model, inputs, s, args, lib, vis, lmc)
            runs[s].append(rec)
            print(f"  rep {r} {s}: prefill {rec['prefill']:.2f} s (vision {rec['vision']:.2f}, "
                  f"LLM {rec['llm']:.2f}, select {rec['select'] * 1e3:.1f} ms, relevance "
                  f"{rec['relevance'] * 1e3:.1f} ms), decode {rec['decode_tps']:.2f} tok/s, "
                  f"kept {rec['kept']}, drop {rec['drop_layer']}", flush=True)
    c_ratios = runs["c"][-1]["ratios"]
    drops = {tuple(x["drop_layer"] or []) for x in runs["c"]}
    return {"name": name, "runs": runs, "probe": probe, "L": L, "n_img": n_img,
            "ratios": c_ratios, "drops": drops, "params": params}


def med(runs, key):
    return statistics.median(r[key] for r in runs)


def report(res, args):
    runs = res["runs"]
    a_pre, a_dec = med(runs["a"], "prefill"), med(runs["a"], "decode_tps")
    print(f"\n### {res['name']} (medians of {args.reps}; times in s)")
    ratios = ", ".join(f"layer {j}: t2v {v[0]:.3f}, v2t {v[1]:.3f}"
                       for (_, j), v in sorted((res["ratios"] or {}).items()))
    print(f"stage 2: probe layer {res['probe']} of {res['L']}, tau {args.tau} "
          f"(FORCED: observed {ratios}); drop layers seen {sorted(res['drops'])}")
    print("| setting | visual tokens to LLM | prefill (TTFT) | vs (a) | vision tower | "
          "LLM prefill | LLM vs (a) | selection (libtodre) | stage-2 probe (libtodre) | "
          "libtodre share of prefill | decode tok/s | vs (a) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    a_llm = med(runs["a"], "llm")
    for s in SETTINGS:
        rs = runs[s]
        pre, dec, llm = med(rs, "prefill"), med(rs, "decode_tps"), med(rs, "llm")
        sel, rel, vis = med(rs, "select"), med(rs, "relevance"), med(rs, "vision")
        share = statistics.median((r["select"] + r["relevance"]) / r["prefill"] for r in rs)
        kept = rs[-1]["kept"][0] if rs[-1]["kept"] else res["n_img"]
        print(f"| {LABEL[s]} | {kept} | {pre:.2f} | {a_pre / pre:.2f}x | {vis:.2f} | {llm:.2f} | "
              f"{a_llm / llm:.2f}x | {sel * 1e3:.1f} ms | {rel * 1e3:.1f} ms | "
              f"{share * 100:.2f} % | {dec:.2f} | {dec / a_dec:.2f}x |")
    b = runs["b"]
    share_b = statistics.median(r["select"] / r["prefill"] for r in b)
    speed = a_pre / med(b, "prefill")
    vis_share = med(runs["a"], "vision") / a_pre
    print(f"targets: selection {share_b * 100:.2f} % of the pruned prefill (< 2 %: "
          f"{'met' if share_b < 0.02 else 'NOT met'}); prefill at ratio 0.1 {speed:.2f}x "
          f"faster (>= 3x: {'met' if speed >= 3 else 'NOT met'}); the vision tower is "
          f"{vis_share * 100:.0f} % of the unpruned prefill (not pruned: the bound is "
          f"{1 / vis_share:.2f}x)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", nargs="+", default=["llava", "qwen"],
                    choices=["llava", "qwen"])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--new-tokens", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--ffn", type=int, default=2816)
    ap.add_argument("--qwen-px", type=int, default=448,
                    help="Qwen2.5-VL image side in pixels (multiple of 28)")
    ap.add_argument("--tau", type=float, default=1.0,
                    help="stage-2 threshold; above the observed ratios forces the drop")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                    help="where the model runs (cuda: libtodre's CUDA backend selects)")
    ap.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], default="float32")
    ap.add_argument("--preset", choices=["none", "7b"], default="none",
                    help="7b: the 7B language models' shapes (overrides --layers/--width/--ffn)")
    args = ap.parse_args()
    global DEVICE
    DEVICE = args.device
    torch.set_num_threads(args.threads)
    if DEVICE == "cuda":
        print(f"GPU: {torch.cuda.get_device_name(0)}; libtodre backends "
              f"{todre.available_backends()}; {args.dtype}")
    lib = LibClock()
    print(f"libtodre {todre.__file__} on {os.environ.get('TODRE_LIBRARY', '(default)')}; "
          f"torch {torch.__version__}, {args.threads} threads; {platform.processor() or ''}")
    print("uptime:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    builders = {"llava": ("LLaVA-NeXT", llava_next), "qwen": ("Qwen2.5-VL", qwen2_5_vl)}
    results = [run_model(*builders[m], args, lib) for m in args.models]
    for res in results:
        report(res, args)
    print("\nuptime:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())


if __name__ == "__main__":
    main()
