"""The hf tests run tiny models: one intra-op thread is as fast as several and
keeps a shared machine from oversubscription (spinning OpenMP workers made the
suite several times slower under load)."""

import torch

torch.set_num_threads(1)
