"""Checks shared by the LLaVA-NeXT and Qwen2.5-VL integration tests."""

import torch

import todre.hf

GEN = dict(max_new_tokens=6, do_sample=False)


def generate(model, inputs, **kw):
    return model.generate(**inputs, **GEN, **kw)


def expected_k(n, ratio):
    return max(1, min(n, int(ratio * n + 0.5)))


def capture_llm_inputs(model):
    """Record the inputs_embeds and position ids the language model receives."""
    seen = []

    def hook(module, args, kwargs):
        seen.append({k: kwargs.get(k) for k in ("inputs_embeds", "position_ids",
                                                  "attention_mask")})
    handle = model.model.language_model.register_forward_pre_hook(hook, with_kwargs=True)
    return seen, handle


def cache_lengths(out):
    return [layer.keys.shape[-2] for layer in out.past_key_values.layers]


def check_ratio_one_equals_unpruned(model, inputs):
    base = generate(model, inputs)
    todre.hf.enable(model, ratio=1.0, stage2=False)
    try:
        same = generate(model, inputs)
    finally:
        todre.hf.disable(model)
    assert torch.equal(base, same)
    assert len(set(base[:, -GEN["max_new_tokens"]:].flatten().tolist())) > 1  # not degenerate


def check_cached_decoding_equals_recomputation(model, inputs, probe):
    """With tau = 1 every probe drops; decoding from the pruned KV cache must give
    the tokens a full recomputation (no cache: every step is a new prefill that
    drops again) gives."""
    todre.hf.enable(model, ratio=0.5, tau=1.0, probe_layers=[probe])
    try:
        cached = generate(model, inputs)
        recomputed = generate(model, inputs, use_cache=False)
    finally:
        todre.hf.disable(model)
    assert torch.equal(cached, recomputed)


def check_cache_after_drop(model, inputs, probe, ratio=0.25):
    todre.hf.enable(model, ratio=ratio, tau=1.0, probe_layers=[probe])
    try:
        out = generate(model, inputs, return_dict_in_generate=True)
        st = todre.hf.stats(model)
    finally:
        todre.hf.disable(model)
    B = inputs["input_ids"].shape[0]
    assert st["drop_layer"] == [probe] * B
    lengths = cache_lengths(out)
    steps = GEN["max_new_tokens"] - 1          # the last token is never cached
    real = inputs["attention_mask"].sum(-1)
    removed = torch.tensor(st["image_tokens"]) - torch.tensor(st["kept_tokens"])
    prompt = int((real - removed).max())       # pruned prompts, left padded
    without_visual = int((real - torch.tensor(st["image_tokens"])).max())
    assert lengths[:probe + 1] == [prompt + steps] * (probe + 1)
    assert lengths[probe + 1:] == [without_visual + steps] * (len(lengths) - probe - 1)
    return out, st
