#!/usr/bin/env python3
"""Write the demo inputs for scripts/demo.sh (all GENERATED, fixed seed).

Stage 1 (LLaVA-NeXT-7B sized):
  emb.npy    [2880, 4096] float16 visual token embeddings: an AnyRes image as
             a 24x24 thumbnail (rows 0..575) followed by four 24x24 crops of
             the 48x48 high-resolution grid. Tokens of one image region share
             a prototype vector, plus noise and a common offset (LLM
             embeddings are anisotropic), so the set has real redundancy.
  cls.npy    [2880] float32 CLS attention of the vision encoder, one softmax
             per 576-token block, peaked on a "salient" region.
Stage 2 (one decoder layer, sequence [system 35 | visual 288 | text 40]):
  types.npy  [363] int64 token types (0 system, 1 visual, 2 text).
  attn_late.npy, attn_early.npy  [32, 363, 363] float32 causal attention
             probabilities: a late layer where text mostly attends to the
             attention sink and to text, and an early layer where text still
             looks at the image.
  q.npy, k.npy  [32, 363, 128] and [8, 363, 128] float16 post-RoPE queries
             and keys (grouped-query attention) with the same late-layer
             pattern, for the fused form.
None of this comes from a real model; it only has the shapes and the broad
structure of one.
"""
import argparse
import os

import numpy as np

N_SIDE, D = 24, 4096
BLOCK = N_SIDE * N_SIDE                      # 576 tokens per view
N_SYSTEM, N_VISUAL, N_TEXT = 35, 288, 40
HEADS, KV_HEADS, HEAD_DIM = 32, 8, 128


def region_map(rng, size, n_regions=14):
    """Label of each cell of a size x size image: nearest of n random seeds."""
    seeds = rng.random((n_regions, 2))
    ys, xs = np.mgrid[0:size, 0:size] / size
    cells = np.stack([ys.ravel(), xs.ravel()], axis=1)
    dist = ((cells[:, None, :] - seeds[None, :, :]) ** 2).sum(axis=2)
    return dist.argmin(axis=1).reshape(size, size)


def anyres_labels(rng):
    """Region labels of the 2880 tokens: thumbnail, then the four crops."""
    hi = region_map(rng, 2 * N_SIDE)
    thumb = hi[::2, ::2]
    crops = [hi[r:r + N_SIDE, c:c + N_SIDE] for r in (0, N_SIDE) for c in (0, N_SIDE)]
    return np.concatenate([thumb.ravel()] + [c.ravel() for c in crops]), hi.max() + 1


def embeddings(rng, labels, n_regions):
    protos = rng.standard_normal((n_regions, D)).astype(np.float32)
    common = 1.5 * rng.standard_normal(D).astype(np.float32)
    noise = 0.6 * rng.standard_normal((labels.size, D)).astype(np.float32)
    return (protos[labels] + common + noise).astype(np.float16)


def cls_map(rng, labels, n_regions):
    salience = rng.standard_normal(n_regions)
    salience[rng.integers(n_regions)] += 4.0   # one object the encoder looks at
    logits = salience[labels] + 0.3 * rng.standard_normal(labels.size)
    out = np.empty(labels.size, dtype=np.float32)
    for b in range(0, labels.size, BLOCK):
        e = np.exp(logits[b:b + BLOCK] - logits[b:b + BLOCK].max())
        out[b:b + BLOCK] = e / e.sum()
    return out


def token_types():
    return np.concatenate([np.zeros(N_SYSTEM, np.int64), np.ones(N_VISUAL, np.int64),
                           np.full(N_TEXT, 2, np.int64)])


def causal_probs(logits):
    K = logits.shape[-1]
    logits = np.where(np.tril(np.ones((K, K), bool)), logits, -np.inf)
    e = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)).astype(np.float32)


def attention(rng, types, sink, text_to_visual):
    """[H, K, K] probabilities: noise, a sink on key 0, a bias on text->visual."""
    K = types.size
    logits = rng.standard_normal((HEADS, K, K))
    logits[:, :, 0] += sink
    logits += text_to_visual * np.outer(types == 2, types == 1)
    return causal_probs(logits)


def queries_keys(rng, types):
    """Q/K whose causal softmax has the late-layer pattern: every query finds
    key 0 (a sink), text queries are pushed away from visual keys."""
    K = types.size
    u, w = np.linalg.qr(rng.standard_normal((HEAD_DIM, 2)))[0].T
    q = rng.standard_normal((HEADS, K, HEAD_DIM)) + 9.5 * u
    k = rng.standard_normal((KV_HEADS, K, HEAD_DIM))
    k[:, 0] += 9.5 * u
    q[:, types == 2] += 4.6 * w
    k[:, types == 1] -= 4.6 * w
    return q.astype(np.float16), k.astype(np.float16)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="build/demo", help="output directory")
    parser.add_argument("--seed", type=int, default=2026)
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    rng = np.random.default_rng(args.seed)

    labels, n_regions = anyres_labels(rng)
    np.save(os.path.join(args.out, "emb.npy"), embeddings(rng, labels, n_regions))
    np.save(os.path.join(args.out, "cls.npy"), cls_map(rng, labels, n_regions))

    types = token_types()
    np.save(os.path.join(args.out, "types.npy"), types)
    np.save(os.path.join(args.out, "attn_late.npy"), attention(rng, types, 8.0, -1.5))
    np.save(os.path.join(args.out, "attn_early.npy"), attention(rng, types, 1.0, 1.0))
    q, k = queries_keys(rng, types)
    np.save(os.path.join(args.out, "q.npy"), q)
    np.save(os.path.join(args.out, "k.npy"), k)


if __name__ == "__main__":
    main()
