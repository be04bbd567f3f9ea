"""libtodre quickstart (Python, NumPy): keep 10% of a LLaVA-NeXT-sized set of
visual tokens, then run the stage-2 decision on one layer's attention.

A runtime would pass its projector output here; this script makes up 2,880
tokens of width 256 in float16 (576 thumbnail tokens first, then the crops,
as LLaVA-NeXT's AnyRes lays them out) and a CLS attention map. Arrays are read
in place (DLPack), and the result is a NumPy int64 array.

Run:  TODRE_LIBRARY=build/libtodre.so.1 python3 examples/python/quickstart_numpy.py
"""

import numpy as np

import todre

N_TOKENS, N_THUMBNAIL, DIM = 2880, 576, 256


def make_tokens(rng):
    """40 clusters plus noise, so that many tokens are near-duplicates."""
    centers = rng.uniform(-0.5, 0.5, (40, DIM))
    emb = centers[np.arange(N_TOKENS) * 7 % 40] + 0.2 * rng.uniform(-0.5, 0.5, (N_TOKENS, DIM))
    cls = rng.random(N_TOKENS).astype(np.float32)
    return emb.astype(np.float16), cls


def main():
    print(f"libtodre {todre.version()} from {todre.library_path}; "
          f"backends {todre.available_backends()}")
    for dev in todre.devices():
        print(f"  {dev.backend}:{dev.index} {dev.name} ({dev.arch})")
    emb, cls = make_tokens(np.random.default_rng(0))

    # Stage 1: ToDRE max-sum diversification, pivot = CLS argmax in the thumbnail.
    kept = todre.select(emb, ratio=0.10, cls=cls, pivot_range=(0, N_THUMBNAIL))
    print(f"kept {kept.size} of {N_TOKENS} tokens")
    print("first kept positions:", kept[:10].tolist())
    order = todre.select(emb, ratio=0.10, cls=cls, pivot_range=(0, N_THUMBNAIL),
                         order="selection")
    print(f"pivot {order[0]} (CLS argmax of the thumbnail: {int(np.argmax(cls[:N_THUMBNAIL]))})")

    # The same call on several images at once (each exactly as a single call).
    parts = todre.select_batch([emb[:1000], emb[1000:]], ratio=0.10)
    print("per-image kept counts:", [p.size for p in parts])

    # A reusable context (keeps its workspace); errors carry the status.
    with todre.Context("cpu") as ctx:
        ctx.select(emb, keep=64)
        try:
            ctx.select(emb, keep=N_TOKENS + 1)
        except todre.TodreError as err:
            print("as expected:", err)

    # Stage 2: text<->vision attention ratios of one layer (layout
    # [system | visual | text]) and the drop decision at tau = 0.10.
    n_sys, n_vis, n_text, heads = 8, 288, 24, 4
    K = n_sys + n_vis + n_text
    rng = np.random.default_rng(1)
    scores = rng.standard_normal((heads, K, K)).astype(np.float32)
    scores[:, :, n_sys:n_sys + n_vis] -= 7.0        # text hardly looks at the image
    scores = np.where(np.tril(np.ones((K, K), bool)), scores, -np.inf)
    attn = np.exp(scores - scores.max(-1, keepdims=True))
    attn /= attn.sum(-1, keepdims=True)
    rel = todre.Relevance(num_layers=32, tau=0.10)       # probes layer floor(7*32/8) = 28
    rel.set_layout(n_sys, n_vis, n_text)
    decision = rel.observe_probs(28, attn)[0]
    t2v, v2t = rel.ratios(28)
    print(f"layer 28: alpha_t2v={t2v:.4f} alpha_v2t={v2t:.4f} -> {decision.name}")
    if rel.drop_layer() is not None:
        print(f"keep {rel.keep_positions().size} non-visual positions after layer 28")


if __name__ == "__main__":
    main()
