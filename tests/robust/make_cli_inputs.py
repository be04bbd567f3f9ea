"""Small .npy inputs for the valgrind runs of the todre CLI (tests/robust/CMakeLists.txt).

Usage: make_cli_inputs.py DIR. Writes, deterministically:
  emb32.npy [200, 32] float32, emb16.npy [200, 32] float16, cls.npy [200] float32,
  attn.npy [2, 40, 40] float32 (causal rows summing to 1), types.npy [40] uint8
  ([4 system | 24 visual | 12 text]), q.npy [2, 40, 16] and k.npy [1, 40, 16]
  float32 (grouped-query), and bad.npy [200, 32] int32 (an error path).
"""
import sys
from pathlib import Path

import numpy as np

out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
rng = np.random.default_rng(12)
emb = rng.standard_normal((200, 32))
np.save(out / "emb32.npy", emb.astype(np.float32))
np.save(out / "emb16.npy", emb.astype(np.float16))
np.save(out / "cls.npy", rng.random(200).astype(np.float32))
attn = np.tril(rng.random((2, 40, 40)) + 0.05)
np.save(out / "attn.npy", (attn / attn.sum(-1, keepdims=True)).astype(np.float32))
np.save(out / "types.npy", np.array([0] * 4 + [1] * 24 + [2] * 12, dtype=np.uint8))
np.save(out / "q.npy", rng.standard_normal((2, 40, 16)).astype(np.float32))
np.save(out / "k.npy", rng.standard_normal((1, 40, 16)).astype(np.float32))
np.save(out / "bad.npy", np.zeros((200, 32), dtype=np.int32))
