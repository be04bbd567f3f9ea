"""todre.Context: backend, parameters, streams, copies, lifetime, reuse across threads."""

import threading

import numpy as np
import pytest

import todre
import torch

from todre import Backend, ContextParam, DeviceType, Param, Status, TodreError


def test_cpu_context_runs_on_cpu():
    with todre.Context("cpu") as ctx:
        assert ctx.backend == "cpu" == Backend.CPU and isinstance(ctx.backend, str)
        assert (ctx.device_type, ctx.device) == (DeviceType.CPU, 0) and ctx.on_host
        assert "cpu" in repr(ctx)
    assert todre.Context(Backend.CPU).backend == "cpu"
    assert todre.Context(" CPU ").backend == "cpu"


def test_auto_context_picks_the_first_available_backend_after_cpu():
    want = ([n for n in todre.available_backends() if n != "cpu"] or ["cpu"])[0]
    assert todre.Context().backend == want
    assert todre.Context(None).backend == want
    assert todre.Context("auto").backend != "auto"


def test_unavailable_or_unknown_backends_are_errors():
    for info in todre.backends():
        if not info.available:
            with pytest.raises(TodreError) as e:
                todre.Context(info.name)
            assert e.value.status == Status.BACKEND_UNAVAILABLE and e.value.message
    if "cuda" not in {b.name for b in todre.backends()}:
        with pytest.raises(TodreError) as e:
            todre.Context("cuda")
        assert e.value.status in (Status.BACKEND_UNAVAILABLE, Status.INVALID_ARGUMENT)
        assert e.value.message
    # A name nothing registered: the header allows INVALID_ARGUMENT (unknown
    # name) or BACKEND_UNAVAILABLE (no module); the message names it.
    with pytest.raises(TodreError) as e:
        todre.Context("tpu")
    assert e.value.status in (Status.BACKEND_UNAVAILABLE, Status.INVALID_ARGUMENT)
    assert "backend" in e.value.message and "tpu" in e.value.message
    with pytest.raises(TodreError) as e:
        todre.Context(2)
    assert e.value.status == Status.INVALID_ARGUMENT and "backend" in e.value.message
    with pytest.raises(TodreError) as e:
        todre.Context("cpu", device=1)
    assert e.value.status == Status.INVALID_ARGUMENT and "device" in e.value.message


def test_parameters_round_trip_and_reject_out_of_range():
    ctx = todre.Context("cpu", workspace_limit=1 << 20, select_strategy=1, num_threads=1)
    assert ctx.get_param(ContextParam.WORKSPACE_LIMIT) == 1 << 20
    assert ctx.get_param(Param.CONTEXT_WORKSPACE_LIMIT) == 1 << 20
    assert ctx.get_param("select-strategy") == 1
    assert ctx.get_param(Param.CONTEXT_EXP_SELECT_STRATEGY) == 1
    assert ctx.get_param("num_threads") == 1
    assert ctx.get_param("TODRE_CONTEXT_NUM_THREADS") == 1
    with pytest.raises(TodreError) as e:
        ctx.set_param("select-strategy", 7)
    assert e.value.status == Status.INVALID_ARGUMENT
    assert ctx.get_param("select-strategy") == 1  # unchanged
    with pytest.raises(TodreError):
        ctx.set_param("workspace-limit", -1)
    with pytest.raises(TodreError):
        ctx.set_param("no-such-param", 1)
    with pytest.raises(TodreError):
        ctx.set_param("num-threads", 1.5)
    with pytest.raises(TodreError) as e:
        ctx.set_param(Param.SELECT_KEEP, 3)     # a selection parameter
    assert e.value.status == Status.INVALID_ARGUMENT


def test_reset_restores_the_defaults():
    ctx = todre.Context("cpu", workspace_limit=1 << 20, num_threads=2)
    ctx.reset("state")
    assert ctx.get_param("workspace-limit") == 1 << 20
    ctx.reset()
    assert ctx.get_param("workspace-limit") == todre.param_info("workspace-limit").default
    assert ctx.get_param("num-threads") == 0
    with pytest.raises(TodreError):
        ctx.reset("everything")


def test_num_threads_does_not_leak_into_other_contexts(rng):
    a = todre.Context("cpu", num_threads=1)
    b = todre.Context("cpu")
    assert a.get_param("num-threads") == 1 and b.get_param("num-threads") == 0
    E = rng.standard_normal((300, 32)).astype(np.float32)
    assert np.array_equal(a.select(E, keep=30), b.select(E, keep=30))


def test_copy_between_host_arrays(rng):
    ctx = todre.Context("cpu")
    src = rng.standard_normal((5, 7)).astype(np.float32)
    dst = np.zeros_like(src)
    assert ctx.copy(dst, src) is dst and np.array_equal(dst, src)
    t = torch.zeros(5, 7)
    ctx.copy(t, src)
    assert np.array_equal(t.numpy(), src)
    host = ctx.to_host(src)
    assert host is src                        # already on the host: no copy
    with pytest.raises(TodreError) as e:
        ctx.copy(np.zeros((5, 6), np.float32), src)
    assert e.value.status == Status.INVALID_ARGUMENT
    with pytest.raises(TodreError):
        ctx.copy(np.zeros((5, 7), np.float16), src)
    with pytest.raises(TodreError) as e:
        ro = np.zeros_like(src)
        ro.flags.writeable = False
        ctx.copy(ro, src)
    assert "dst" in e.value.message


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


def test_one_context_shared_by_threads(rng):
    """A Context (and the Relevance objects using it) may be shared between
    threads: its calls take turns on the handle, so every concurrent call gives
    the answer it gives alone."""
    sets = [rng.standard_normal((400 + 50 * i, 64)).astype(np.float32) for i in range(4)]
    ctx = todre.Context("cpu")
    want = [todre.select(E, keep=40 + i, order="selection") for i, E in enumerate(sets)]
    q = rng.standard_normal((4, 60, 16)).astype(np.float32)
    k = rng.standard_normal((2, 60, 16)).astype(np.float32)
    types = np.array([0] * 5 + [1] * 40 + [2] * 15)

    def ratios():
        rel = todre.Relevance(8, probe_layers=[3], context=ctx)
        rel.set_types(types)
        rel.observe_qk(3, q, k)
        return rel.ratios(3)

    want_ratios = ratios()
    results, errors = [], []
    start = threading.Barrier(4)

    def work(i):
        start.wait()
        try:
            for _ in range(10):
                got = ctx.select(sets[i], keep=40 + i, order="selection")
                results.append(np.array_equal(got, want[i]) and ratios() == want_ratios)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(results) == 40 and all(results)


def test_closing_a_context_another_thread_uses(rng):
    """close() waits for a call in progress; the other thread's later calls fail
    with STATE ("already closed"), never touch freed memory."""
    E = rng.standard_normal((600, 64)).astype(np.float32)
    ctx = todre.Context("cpu")
    want = todre.select(E, keep=60)
    outcome, busy = [], threading.Event()

    def work():
        for _ in range(200):
            try:
                got = ctx.select(E, keep=60)
            except TodreError as exc:
                outcome.append(exc)
                return
            outcome.append(np.array_equal(got, want))
            busy.set()

    t = threading.Thread(target=work)
    t.start()
    assert busy.wait(60)
    ctx.close()
    t.join()
    assert all(r is True for r in outcome[:-1])
    last = outcome[-1]
    if isinstance(last, TodreError):
        assert last.status == Status.STATE and "closed" in last.message
    else:                                   # the thread finished before the close
        assert last is True


def test_rows_made_is_read_only_and_counts_the_last_call():
    """TODRE_CONTEXT_EXP_SELECT_ROWS_MADE (experimental, read-only): the Gram
    rows the last selection made under strategy 3, at least one per step but
    the last where the CPU makes rows (AVX2 and up), 0 under strategy 1."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((300, 64)).astype(np.float32)
    ctx = todre.Context("cpu", select_strategy=3)
    assert ctx.get_param("select-rows-made") == 0          # fresh
    ctx.select(x, keep=30, pivot="center")
    made = ctx.get_param(ContextParam.SELECT_ROWS_MADE)
    generic = todre.devices("cpu")[0].arch == "generic"  # ROWS runs as GRAM there
    assert made == 0 if generic else made >= 29
    with pytest.raises(TodreError) as e:
        ctx.set_param("select-rows-made", 0)
    assert e.value.status == Status.INVALID_ARGUMENT and "read-only" in e.value.message
    assert ctx.get_param("select-rows-made") == made       # unchanged
    ctx.set_param("select-strategy", 1)
    ctx.select(x, keep=30, pivot="center")
    assert ctx.get_param("select-rows-made") == 0


def test_experimental_strategy_is_used_only_under_its_name(monkeypatch):
    """TODRE_CONTEXT_EXP_SELECT_STRATEGY may change in any release: the package
    checks todre_param_name() before passing value 1000 to the library."""
    from todre import _lib
    assert _lib.lib.todre_param_name(1000) == b"TODRE_CONTEXT_EXP_SELECT_STRATEGY"
    real = _lib.lib.todre_param_name
    monkeypatch.setattr(_lib.lib, "todre_param_name",
                        lambda p: b"TODRE_CONTEXT_EXP_SOMETHING_ELSE" if p == 1000 else real(p))
    with pytest.raises(TodreError) as e:
        todre.Context("cpu", select_strategy=1)
    assert e.value.status == Status.UNSUPPORTED
    assert "TODRE_CONTEXT_EXP_SELECT_STRATEGY" in e.value.message
    ctx = todre.Context("cpu", num_threads=1)      # stable parameters are unaffected
    assert ctx.get_param("num-threads") == 1
