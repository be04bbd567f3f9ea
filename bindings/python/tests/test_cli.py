"""The package and the C CLI give the same answers on the same .npy files."""

import json
import subprocess

import numpy as np
import pytest

import todre


def _run(cli, *args):
    # The package computes NumPy arrays on the CPU backend; the tool's "auto"
    # would take a GPU where there is one (whose float sums may differ in the
    # last bits, docs/cuda.md): compare like with like.
    out = subprocess.run([cli, *map(str, args), "--backend", "cpu", "--json"],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


@pytest.mark.parametrize("extra,kwargs", [
    ((), {}),
    (("--objective", "max-min"), dict(objective="max-min")),
    (("--pivot", "random", "--seed", "7"), dict(pivot="random", seed=7)),
    (("--pivot", "center", "--pivot-range", "10:40"), dict(pivot="center",
                                                           pivot_range=(10, 40))),
    (("--order", "selection"), dict(order="selection")),
])
def test_select_matches_cli(cli, tmp_path, rng, extra, kwargs):
    E = rng.standard_normal((150, 24)).astype(np.float32)
    np.save(tmp_path / "E.npy", E)
    got = _run(cli, "select", "--embeddings", tmp_path / "E.npy", "--ratio", "0.1", *extra)
    assert got["indices"] == todre.select(E, ratio=0.1, **kwargs).tolist()


def test_select_with_cls_matches_cli(cli, tmp_path, rng):
    E = rng.standard_normal((90, 16)).astype(np.float16)
    a = rng.random(90).astype(np.float32)
    np.save(tmp_path / "E.npy", E)
    np.save(tmp_path / "A.npy", a)
    got = _run(cli, "select", "--embeddings", tmp_path / "E.npy", "--cls", tmp_path / "A.npy",
               "--keep", "12", "--pivot", "cls")
    assert got["indices"] == todre.select(E, keep=12, cls=a, pivot="cls").tolist()


def test_relevance_matches_cli(cli, tmp_path, rng):
    q = rng.standard_normal((4, 20, 8)).astype(np.float32)
    k = rng.standard_normal((2, 20, 8)).astype(np.float32)
    types = np.array([0] * 3 + [1] * 10 + [2] * 7, np.uint8)
    for name, arr in (("q", q), ("k", k), ("t", types)):
        np.save(tmp_path / f"{name}.npy", arr)
    got = _run(cli, "relevance", "--q", tmp_path / "q.npy", "--k", tmp_path / "k.npy",
               "--types", tmp_path / "t.npy", "--tau", "0.3")
    rel = todre.Relevance(1, probe_layers=[0], tau=0.3)
    rel.set_types(types)
    decision = rel.observe_qk(0, q, k)[0]
    t2v, v2t = rel.ratios(0)
    assert got["alpha_t2v"] == pytest.approx(t2v, abs=1e-12)
    assert got["alpha_v2t"] == pytest.approx(v2t, abs=1e-12)
    assert got["drop"] == (decision == todre.Decision.DROP)
