"""todre.Relevance against the stage-2 formula of docs/semantics.md (float64)."""

import numpy as np
import pytest
import torch

import todre
from todre import Decision, Status, TodreError
from helpers import causal_softmax, ratios_reference


def _layout_types(n_sys, n_vis, n_text):
    return np.array([0] * n_sys + [1] * n_vis + [2] * n_text, np.uint8)


def _probs(rng, H, K, Q=None):
    Q = K if Q is None else Q
    return causal_softmax(rng.standard_normal((H, Q, 8)), rng.standard_normal((H, K, 8)))


def test_default_probe_layer_is_seven_eighths():
    rel = todre.Relevance(32)
    assert rel.is_probe(28) and not rel.is_probe(27) and not rel.is_probe(29)
    assert rel.tau == pytest.approx(0.10)
    assert rel.probe_layers == [28] and rel.schedule == todre.Schedule.LIST


def test_probe_layers_are_read_back_sorted_and_distinct():
    rel = todre.Relevance(12, probe_layers=[9, 3, 9, 0])
    assert rel.probe_layers == [0, 3, 9]
    assert [j for j in range(12) if rel.is_probe(j)] == [0, 3, 9]
    rel.reset("params")
    assert rel.probe_layers == [10]
    rel.set_probe_layers(np.arange(12))
    assert rel.probe_layers == list(range(12))


def test_ratios_from_probabilities_equal_the_formula(rng):
    types = _layout_types(3, 10, 7)
    A = _probs(rng, 4, 20)
    rel = todre.Relevance(8, probe_layers=[5], tau=0.0)
    rel.set_layout(3, 10, 7)
    assert rel.observe_probs(5, A.astype(np.float32)) == [Decision.KEEP]
    assert rel.ratios(5) == pytest.approx(ratios_reference(A, types), abs=1e-6)


def test_interleaved_types_give_nonzero_v2t(rng):
    types = np.array([0, 2, 2, 1, 1, 1, 2, 1, 1, 2, 2], np.uint8)
    A = _probs(rng, 2, types.size)
    rel = todre.Relevance(4, probe_layers=[3], tau=0.0)
    rel.set_types(types)
    rel.observe_probs(3, torch.from_numpy(A.astype(np.float32)))
    t2v, v2t = rel.ratios(3)
    want = ratios_reference(A, types)
    assert v2t > 0 and (t2v, v2t) == pytest.approx(want, abs=1e-6)


def test_chunked_prefill_uses_the_last_queries(rng):
    types = _layout_types(2, 6, 6)
    A = _probs(rng, 3, 14, Q=5)
    rel = todre.Relevance(2, probe_layers=[0], tau=0.0)
    rel.set_types(types)
    rel.observe_probs(0, A.astype(np.float32))
    assert rel.ratios(0) == pytest.approx(ratios_reference(A, types), abs=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_fused_qk_path_equals_probabilities(rng, dtype):
    H, Hkv, K, dh = 8, 2, 24, 16
    q = torch.from_numpy(rng.standard_normal((H, K, dh)).astype(np.float32)).to(dtype)
    k = torch.from_numpy(rng.standard_normal((Hkv, K, dh)).astype(np.float32)).to(dtype)
    types = _layout_types(4, 12, 8)
    A = causal_softmax(q.float().numpy(), k.float().numpy(), scale=0.3)
    rel = todre.Relevance(4, probe_layers=[2], tau=0.0)
    rel.set_types(types)
    rel.observe_qk(2, q, k, scale=0.3)
    assert rel.ratios(2) == pytest.approx(ratios_reference(A, types), abs=1e-5)


def test_batched_observation_with_per_sequence_types(rng):
    types = np.stack([_layout_types(2, 8, 6), _layout_types(4, 4, 8)])
    A = np.stack([_probs(rng, 2, 16), _probs(rng, 2, 16)])
    rel = todre.Relevance(3, batch=2, probe_layers=[1], tau=0.0)
    rel.set_types(types)
    assert rel.observe_probs(1, A.astype(np.float32)) == [Decision.KEEP, Decision.KEEP]
    for b in range(2):
        assert rel.ratios(1, seq=b) == pytest.approx(ratios_reference(A[b], types[b]),
                                                     abs=1e-6)


def test_drop_decision_and_keep_positions(rng):
    A = _probs(rng, 2, 12)
    rel = todre.Relevance(4, probe_layers=[2], tau=1.0)
    rel.set_layout(2, 6, 4)
    assert rel.drop_layer() is None
    assert rel.observe_probs(0, A.astype(np.float32)) == [Decision.NOT_PROBED]
    assert rel.observe_probs(2, A.astype(np.float32)) == [Decision.DROP]
    assert rel.drop_layer() == 2
    assert rel.keep_positions().tolist() == [0, 1, 8, 9, 10, 11]
    rel.reset()
    assert rel.drop_layer() is None


def test_decision_is_strict_against_tau(rng):
    A = _probs(rng, 2, 12)
    rel = todre.Relevance(2, probe_layers=[1], tau=0.0)
    rel.set_layout(2, 6, 4)
    assert rel.observe_probs(1, A.astype(np.float32)) == [Decision.KEEP]


def test_until_drop_schedule(rng):
    A = _probs(rng, 2, 12).astype(np.float32)
    rel = todre.Relevance(8, probe_layers=[5], schedule="until-drop", tau=1.0)
    rel.set_layout(2, 6, 4)
    assert rel.is_probe(6) and not rel.is_probe(4)
    assert rel.observe_probs(5, A) == [Decision.DROP]
    assert rel.observe_probs(6, A) == [Decision.ALREADY_DROPPED]
    assert not rel.is_probe(7)


def test_relevance_errors():
    with pytest.raises(TodreError):
        todre.Relevance(0)
    with pytest.raises(TodreError):
        todre.Relevance(4, batch=0)
    rel = todre.Relevance(4, probe_layers=[3])
    with pytest.raises(TodreError) as e:
        rel.observe_probs(3, np.ones((1, 4, 4), np.float32) / 4)
    assert e.value.status == Status.STATE               # no types yet
    rel.set_layout(1, 2, 1)
    with pytest.raises(TodreError) as e:
        rel.ratios(3)
    assert e.value.status == Status.STATE               # not probed yet
    for bad in (lambda: setattr(rel, "tau", 1.5), lambda: setattr(rel, "tau", "x"),
                lambda: rel.set_probe_layers([4]), lambda: rel.set_probe_layers([]),
                lambda: rel.set_probe_layers(["a"]), lambda: rel.set_schedule("sometimes"),
                lambda: rel.set_types([0, 1, 3]), lambda: rel.set_types([0.5, 1.0]),
                lambda: rel.set_types([[0, 1], [1, 2], [2, 2]]),
                lambda: rel.set_layout(-1, 2, 2),
                lambda: rel.observe_probs(9, np.ones((1, 4, 4), np.float32)),
                lambda: rel.observe_probs(3, np.ones((1, 4, 5), np.float32)),
                lambda: rel.observe_probs(3, np.ones((4, 4), np.float64)),
                lambda: rel.observe_qk(3, np.ones((3, 4, 2), np.float32),
                                       np.ones((2, 4, 2), np.float32)),
                lambda: rel.observe_qk(3, np.ones((2, 4, 2), np.float32),
                                       np.ones((2, 4, 2), np.float16)),
                lambda: rel.observe_qk(3, np.ones((2, 4, 2), np.float32),
                                       np.ones((2, 4, 2), np.float32), scale=-1.0),
                lambda: rel.observe_probs(3, np.full((1, 4, 4), np.nan, np.float32)),
                lambda: rel.keep_positions(seq=3), lambda: rel.drop_layer(seq=-1),
                lambda: rel.is_probe(4)):
        with pytest.raises(TodreError):
            bad()
    rel.close()
    with pytest.raises(TodreError):
        rel.set_layout(1, 1, 1)


def test_chunked_prefill_accumulates(rng):
    # The whole prefill's probabilities, observed in chunks: keys [0, end),
    # queries [start, end). Earlier chunks are PENDING; the last one decides
    # with the ratios of the whole prefill.
    A = _probs(rng, 2, 20).astype(np.float32)
    whole = todre.Relevance(2, probe_layers=[1])
    whole.set_layout(2, 10, 8)
    whole.observe_probs(1, A)
    rel = todre.Relevance(2, probe_layers=[1])
    rel.set_layout(2, 10, 8)
    assert rel.observe_probs(1, A[:, 0:9, :9]) == [Decision.PENDING]
    with pytest.raises(todre.TodreError):
        rel.ratios(1)
    assert rel.observe_probs(1, A[:, 9:15, :15]) == [Decision.PENDING]
    assert rel.observe_probs(1, A[:, 15:20, :20]) in ([Decision.KEEP], [Decision.DROP])
    assert rel.ratios(1) == pytest.approx(whole.ratios(1), rel=1e-6)
