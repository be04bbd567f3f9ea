"""todre.Context: backend, parameters, streams, lifetime, reuse across threads."""

import threading

import numpy as np
import pytest

import todre
from todre import Backend, ContextParam, Status, TodreError


def test_cpu_context_runs_on_cpu():
    with todre.Context("cpu") as ctx:
        assert ctx.backend == Backend.CPU
        assert "cpu" in repr(ctx)


def test_auto_context_picks_an_available_backend():
    ctx = todre.Context()
    assert ctx.backend == (Backend.CUDA if "cuda" in todre.backends() else Backend.CPU)


def test_explicit_cuda_without_cuda_is_backend_unavailable():
    if "cuda" in todre.backends():
        pytest.skip("CUDA is available here")
    with pytest.raises(TodreError) as e:
        todre.Context("cuda")
    assert e.value.status == Status.BACKEND_UNAVAILABLE and e.value.message


def test_parameters_round_trip_and_reject_out_of_range():
    ctx = todre.Context("cpu", workspace_limit=1 << 20, select_strategy=1, num_threads=1)
    assert ctx.get_param(ContextParam.WORKSPACE_LIMIT) == 1 << 20
    assert ctx.get_param("select-strategy") == 1
    assert ctx.get_param("num_threads") == 1
    with pytest.raises(TodreError) as e:
        ctx.set_param("select-strategy", 7)
    assert e.value.status == Status.INVALID_ARGUMENT
    assert ctx.get_param("select-strategy") == 1  # unchanged
    with pytest.raises(TodreError):
        ctx.set_param("workspace-limit", -1)
    with pytest.raises(TodreError):
        ctx.set_param("no-such-param", 1)


def test_strategies_give_the_same_selection(rng):
    E = rng.standard_normal((300, 32)).astype(np.float32)
    outs = [todre.Context("cpu", select_strategy=s).select(E, keep=40, order="selection")
            for s in (0, 1, 2)]
    assert all(np.array_equal(outs[0], o) for o in outs)


def test_cpu_stream_rules():
    ctx = todre.Context("cpu")
    ctx.set_stream(0)
    ctx.synchronize()
    with pytest.raises(TodreError) as e:
        ctx.set_stream(0x1234)
    assert e.value.status == Status.INVALID_ARGUMENT


def test_closed_context_raises_state():
    ctx = todre.Context("cpu")
    ctx.close()
    ctx.close()  # idempotent
    with pytest.raises(TodreError) as e:
        ctx.select(np.ones((4, 2), np.float32), keep=1)
    assert e.value.status == Status.STATE
    assert "closed" in repr(ctx)


def test_context_reuse_matches_module_function(rng):
    E = rng.standard_normal((200, 24)).astype(np.float32)
    ctx = todre.Context("cpu")
    first = ctx.select(E, ratio=0.2)
    for _ in range(3):
        assert np.array_equal(ctx.select(E, ratio=0.2), first)
    assert np.array_equal(todre.select(E, ratio=0.2), first)
    parts, _ = ctx.select_batch(E, offsets=[0, 100, 200], keep=5)
    assert parts.shape == (10,)


def test_threads_use_separate_contexts(rng):
    """The module functions keep one context per thread, so concurrent calls
    (the GIL is released during C calls) all give the single-thread answer."""
    E = rng.standard_normal((500, 64)).astype(np.float32)
    want = todre.select(E, keep=50, order="selection")
    results, errors = [], []

    def work():
        try:
            for _ in range(5):
                results.append(todre.select(E, keep=50, order="selection"))
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(results) == 20 and all(np.array_equal(r, want) for r in results)
