"""The validation classes found by the fuzzers (docs/testing.md), through the package:
misaligned NumPy views (DLPack and __array_interface__ paths), aliased
(zero-stride) outputs, a scale above FLT_MAX, scores that overflow float32,
and attention probabilities near FLT_MAX. Each refusal is a todre.TodreError
with the C status and a message naming the argument."""

import numpy as np
import pytest
from numpy.lib.stride_tricks import as_strided

import todre
from todre import Status

F32_MAX = float(np.finfo(np.float32).max)


def misaligned(shape, dtype, shift=None, seed=0):
    """A NumPy view of `shape` whose data address is `shift` bytes (default half
    an element) past an aligned one, filled with values in [0, 1)."""
    dtype = np.dtype(dtype)
    shift = dtype.itemsize // 2 if shift is None else shift
    count = int(np.prod(shape))
    raw = np.zeros(count * dtype.itemsize + 64, dtype=np.uint8)
    base = (-raw.ctypes.data) % 64  # an aligned start inside raw
    view = np.frombuffer(raw, dtype=dtype, count=count, offset=base + shift).reshape(shape)
    assert view.ctypes.data % dtype.itemsize == shift
    view.flags.writeable = True
    view[...] = np.random.default_rng(seed).random(shape).astype(dtype)
    return view


class InterfaceOnly:
    """An array that offers only __array_interface__ (the package's second path)."""

    def __init__(self, arr):
        self._arr = arr
        self.__array_interface__ = arr.__array_interface__


def assert_refused(exc_info, status, name, word):
    err = exc_info.value
    assert isinstance(err, todre.TodreError)
    assert err.status == status, err
    assert err.message.startswith(name + ":"), err.message
    assert word in err.message, err.message


def relevance(batch=1):
    rel = todre.Relevance(num_layers=2, batch=batch, probe_layers=[1])
    rel.set_layout(1, 3, 2)
    return rel


QK_SHAPES = ((4, 6, 8), (2, 6, 8))  # q [H, Q, dh], k [H_kv, K, dh]


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("wrap", [lambda a: a, InterfaceOnly], ids=["dlpack", "interface"])
def test_select_misaligned(dtype, wrap):
    emb = misaligned((8, 4), dtype)
    with pytest.raises(todre.TodreError) as e:
        todre.select(wrap(emb), keep=3)
    assert_refused(e, Status.INVALID_ARGUMENT, "embeddings", "misaligned")
    # the same values, aligned, are accepted
    assert len(todre.select(np.ascontiguousarray(emb).copy(), keep=3)) == 3
    cls = misaligned((8,), np.float32)
    with pytest.raises(todre.TodreError) as e:
        todre.select(np.ones((8, 4), np.float32), keep=3, cls=wrap(cls))
    assert_refused(e, Status.INVALID_ARGUMENT, "cls", "misaligned")


def test_select_batch_misaligned():
    emb = misaligned((8, 4), np.float32)
    with pytest.raises(todre.TodreError) as e:
        todre.select_batch(emb, offsets=[0, 3, 8], keep=[1, 2])
    assert_refused(e, Status.INVALID_ARGUMENT, "embeddings", "misaligned")


@pytest.mark.parametrize("wrap", [lambda a: a, InterfaceOnly], ids=["dlpack", "interface"])
def test_relevance_misaligned(wrap):
    rel = relevance()
    with pytest.raises(todre.TodreError) as e:
        rel.observe_probs(1, wrap(misaligned((4, 6, 6), np.float32)))
    assert_refused(e, Status.INVALID_ARGUMENT, "attn", "misaligned")
    q = np.random.default_rng(1).standard_normal(QK_SHAPES[0]).astype(np.float32)
    k = np.random.default_rng(2).standard_normal(QK_SHAPES[1]).astype(np.float32)
    with pytest.raises(todre.TodreError) as e:
        rel.observe_qk(1, wrap(misaligned(QK_SHAPES[0], np.float32)), k)
    assert_refused(e, Status.INVALID_ARGUMENT, "q", "misaligned")
    with pytest.raises(todre.TodreError) as e:
        rel.observe_qk(1, q, wrap(misaligned(QK_SHAPES[1], np.float32)))
    assert_refused(e, Status.INVALID_ARGUMENT, "k", "misaligned")
    # 16-bit q and k one byte off
    with pytest.raises(todre.TodreError) as e:
        rel.observe_qk(1, q.astype(np.float16), wrap(misaligned(QK_SHAPES[1], np.float16)))
    assert_refused(e, Status.INVALID_ARGUMENT, "k", "misaligned")
    # the handle still works
    assert len(rel.observe_qk(1, q, k)) == 1


def test_copy_misaligned_and_aliased():
    ctx = todre.Context("cpu")
    src = np.arange(4, dtype=np.float32)
    with pytest.raises(todre.TodreError) as e:
        ctx.copy(np.empty(4, np.float32), misaligned((4,), np.float32))
    assert_refused(e, Status.INVALID_ARGUMENT, "src", "misaligned")
    dst = misaligned((4,), np.float32)
    before = dst.copy()
    with pytest.raises(todre.TodreError) as e:
        ctx.copy(dst, src)
    assert_refused(e, Status.INVALID_ARGUMENT, "dst", "misaligned")
    assert np.array_equal(dst, before)
    # a writable zero-stride output: four indices, one element
    base = np.full(4, -1.0, np.float32)
    alias = as_strided(base, shape=(4,), strides=(0,), writeable=True)
    with pytest.raises(todre.TodreError) as e:
        ctx.copy(alias, src)
    assert_refused(e, Status.INVALID_ARGUMENT, "dst", "alias")
    assert np.all(base == -1.0)
    out = np.empty(4, np.float32)
    assert ctx.copy(out, src) is out and np.array_equal(out, src)


def test_scale_above_flt_max():
    rel = relevance()
    rng = np.random.default_rng(3)
    q = rng.standard_normal(QK_SHAPES[0]).astype(np.float32)
    k = rng.standard_normal(QK_SHAPES[1]).astype(np.float32)
    for scale in (np.nextafter(F32_MAX, np.inf), 1e300):
        with pytest.raises(todre.TodreError) as e:
            rel.observe_qk(1, q, k, scale=scale)
        assert_refused(e, Status.INVALID_ARGUMENT, "scale", "FLT_MAX")
    # below FLT_MIN it would round to a subnormal or 0 (a fuzzer finding)
    for scale in (np.nextafter(float(np.finfo(np.float32).tiny), 0.0), 1e-75, 5e-324):
        with pytest.raises(todre.TodreError) as e:
            rel.observe_qk(1, q, k, scale=scale)
        assert_refused(e, Status.INVALID_ARGUMENT, "scale", "FLT_MIN")
    assert len(rel.observe_qk(1, q, k)) == 1


@pytest.mark.parametrize("sign", [1.0, -1.0, 0.0])
def test_qk_scores_overflow(sign):
    """Finite q and k whose scale * q . k is +Inf, -Inf or NaN (sign 0: +Inf and
    -Inf products in one dot product) in float32: NONFINITE, the handle usable."""
    rel = relevance()
    q = np.full(QK_SHAPES[0], 1e20, np.float32)
    k = np.full(QK_SHAPES[1], 1e20, np.float32)
    if sign < 0:
        k = -k
    elif sign == 0:
        k[..., 1::2] *= -1
    with pytest.raises(todre.TodreError) as e:
        rel.observe_qk(1, q, k, scale=1.0)
    assert e.value.status == Status.NONFINITE
    assert "q, k:" in e.value.message and "overflows float32" in e.value.message
    with pytest.raises(todre.TodreError) as e:
        rel.ratios(1)
    assert e.value.status == Status.STATE
    rng = np.random.default_rng(4)
    assert len(rel.observe_qk(1, rng.standard_normal(QK_SHAPES[0]).astype(np.float32),
                              rng.standard_normal(QK_SHAPES[1]).astype(np.float32))) == 1


def reference_ratios(attn, types):
    """float64 (alpha_t2v, alpha_v2t) of attn [H, K, K] (docs/semantics.md)."""
    a = attn.astype(np.float64)
    types = np.asarray(types)
    out = []
    for qt, other in ((2, 1), (1, 2)):
        rows = a[:, types == qt, :]
        den = rows.sum()
        out.append(rows[:, :, types == other].sum() / den if den > 0 else 0.0)
    return tuple(out)


def test_probs_near_flt_max():
    rng = np.random.default_rng(5)
    attn = (2e38 + 1e38 * rng.random((4, 6, 6))).astype(np.float32)
    with np.errstate(over="ignore"):  # a float32 sum of two of them overflows
        assert np.isinf(attn[0, 0, 0] + attn[0, 0, 1])
    rel = relevance()
    rel.observe_probs(1, attn)
    got = rel.ratios(1)
    want = reference_ratios(attn, [0, 1, 1, 1, 2, 2])
    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(got, want, rtol=1e-9)
