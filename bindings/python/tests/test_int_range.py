"""Every integer that crosses the ctypes boundary is range-checked against its C
type (todre/_ints.py) instead of wrapping modulo 2**bits: a value just outside
int64 (int for enums and device indices, a pointer for stream handles) raises
TodreError(INVALID_ARGUMENT) naming the argument, and a value just inside
reaches the library unchanged (read back, or quoted in the library's own
message). Several outside values would wrap to a valid one (2**64 + 5 -> 5),
so a regression selects something instead of raising."""

import ctypes

import numpy as np
import pytest

import todre
from todre import Status, TodreError

RANGE = "is outside the range of the C type"
I64_MIN, I64_MAX = -2**63, 2**63 - 1
INT_MIN, INT_MAX = -2**31, 2**31 - 1
E = np.random.default_rng(0).standard_normal((20, 8)).astype(np.float32)
OFFS = [0, 12, 20]


def python_refuses(fn, what):
    """fn() raises the package's range error naming `what`."""
    with pytest.raises(TodreError) as e:
        fn()
    assert e.value.status == Status.INVALID_ARGUMENT
    assert RANGE in e.value.message or "too large for a C double" in e.value.message, \
        e.value.message
    assert e.value.message.startswith(what), e.value.message
    return e.value


def library_answers(fn, value, what):
    """fn() reaches the library with `value` unchanged: the library's own error
    names `what` and quotes the value (no range error from the package)."""
    with pytest.raises(TodreError) as e:
        fn()
    assert e.value.status == Status.INVALID_ARGUMENT
    assert RANGE not in e.value.message
    assert what in e.value.message and str(value) in e.value.message, e.value.message


# ---- selection configuration ------------------------------------------------------

@pytest.mark.parametrize("value", [I64_MAX, 1])
def test_keep_inside_is_kept(value):
    with todre.SelectConfig(keep=value) as cfg:
        assert cfg.get("keep") == value


@pytest.mark.parametrize("value", [2**63, 2**64 + 5, 2**200])
def test_keep_outside_raises(value):
    python_refuses(lambda: todre.SelectConfig(keep=value), "keep")
    python_refuses(lambda: todre.select(E, keep=value), "keep")


def test_keep_inside_reaches_the_selection():
    library_answers(lambda: todre.select(E, keep=I64_MAX), I64_MAX, "keep")


@pytest.mark.parametrize("lo", [0, I64_MAX - 1])
@pytest.mark.parametrize("hi", [-1, I64_MAX])
def test_pivot_range_inside_is_kept(lo, hi):
    with todre.SelectConfig(keep=2, pivot_range=(lo, hi)) as cfg:
        assert (cfg.get("pivot-lo"), cfg.get("pivot-hi")) == (lo, hi)


@pytest.mark.parametrize("rng_", [(I64_MAX, 4), (-1, 4), (0, I64_MIN), (0, -2)])
def test_pivot_range_inside_int64_reaches_the_library(rng_):
    value = rng_[0] if rng_[0] != 0 else rng_[1]
    library_answers(lambda: todre.SelectConfig(keep=2, pivot_range=rng_), value, "value")


@pytest.mark.parametrize("rng_,what", [((2**63, 4), "pivot_range[0]"),
                                       ((I64_MIN - 1, 4), "pivot_range[0]"),
                                       ((0, 2**63), "pivot_range[1]"),
                                       ((0, 2**64 + 5), "pivot_range[1]"),
                                       ((0, I64_MIN - 1), "pivot_range[1]")])
def test_pivot_range_outside_raises(rng_, what):
    python_refuses(lambda: todre.SelectConfig(keep=2, pivot_range=rng_), what)
    python_refuses(lambda: todre.select(E, keep=2, pivot_range=rng_), what)


@pytest.mark.parametrize("seed", [I64_MIN, -1, I64_MAX])
def test_seed_inside_is_kept(seed):
    with todre.SelectConfig(keep=2, seed=seed, pivot="random") as cfg:
        assert cfg.get("seed") == seed
    assert len(todre.select(E, keep=2, pivot="random", seed=seed)) == 2


@pytest.mark.parametrize("seed", [2**63, I64_MIN - 1, 2**64])
def test_seed_outside_raises(seed):
    python_refuses(lambda: todre.select(E, keep=2, pivot="random", seed=seed), "seed")


def test_keep_count_inside_and_outside():
    with todre.SelectConfig(ratio=1.0) as cfg:
        assert cfg.keep_count(I64_MAX) == I64_MAX
        assert cfg.keep_count(np.int64(I64_MAX)) == I64_MAX
        library_answers(lambda: cfg.keep_count(I64_MIN), I64_MIN, "n")
        python_refuses(lambda: cfg.keep_count(2**63), "n")
        python_refuses(lambda: cfg.keep_count(I64_MIN - 1), "n")
        python_refuses(lambda: cfg.keep_count(2**64 + 3), "n")
        with pytest.raises(TodreError):
            cfg.keep_count(3.0)  # not an integer: never truncated


@pytest.mark.parametrize("param", [2**32 + int(todre.Param.SELECT_KEEP), 2**31, -2**31 - 1])
def test_parameter_ids_outside_int_raise(param):
    """A todre_param is a C int: 2**32 + 204 must not become TODRE_SELECT_KEEP."""
    python_refuses(lambda: todre.param_info(param), "param")
    with todre.SelectConfig(keep=2) as cfg:
        python_refuses(lambda: cfg.set(param, 5), "param")
        assert cfg.get("keep") == 2


@pytest.mark.parametrize("param", [INT_MAX, INT_MIN])
def test_parameter_ids_inside_int_reach_the_library(param):
    library_answers(lambda: todre.param_info(param), param, "param")


def test_enum_arguments_do_not_wrap():
    """Enum values are looked up, never truncated: 2**64 + 3 is not Reset.ALL."""
    with todre.Context("cpu") as ctx:
        with pytest.raises(TodreError) as e:
            ctx.reset(2**64 + int(todre.Reset.ALL))
        assert e.value.status == Status.INVALID_ARGUMENT and "what" in e.value.message
    with pytest.raises(TodreError):
        todre.select(E, keep=2, objective=2**64)


@pytest.mark.parametrize("what,value", [("ratio", 10**400), ("ratio", -10**400)])
def test_huge_ints_as_doubles_raise(what, value):
    python_refuses(lambda: todre.select(E, ratio=value), what)


# ---- select_batch: offsets and per-set keep counts given as Python ints ----------------

@pytest.mark.parametrize("offsets", [[0, 12, 2**63], [0, 12, 2**64 + 20], [I64_MIN - 1, 12, 20],
                                     np.array([0, 12, 2**63], dtype=np.uint64)])
def test_batch_offsets_outside_int64_raise(offsets):
    python_refuses(lambda: todre.select_batch(E, offsets=offsets, keep=2), "offsets")


@pytest.mark.parametrize("offsets,value", [([0, 12, I64_MAX], I64_MAX),
                                           ([0, I64_MAX, 20], None),
                                           ([I64_MIN, 12, 20], I64_MIN)])
def test_batch_offsets_inside_int64_reach_the_library(offsets, value):
    with pytest.raises(TodreError) as e:
        todre.select_batch(E, offsets=offsets, keep=2)
    assert e.value.status == Status.INVALID_ARGUMENT and RANGE not in e.value.message
    assert e.value.message.startswith("offsets")
    if value is not None:
        assert str(value) in e.value.message


@pytest.mark.parametrize("keep", [[2**63, 1], [1, 2**64 + 2], np.array([2**63, 1], np.uint64)])
def test_batch_keep_outside_int64_raises(keep):
    python_refuses(lambda: todre.select_batch(E, offsets=OFFS, keep=keep), "keep")


@pytest.mark.parametrize("keep", [[I64_MAX, 1], [I64_MAX, I64_MAX], [1, I64_MIN]])
def test_batch_keep_inside_int64_reaches_the_library(keep):
    """Sums of such counts overflow int64: the package sizes no output from them
    and the library rejects them."""
    bad = keep[0] if keep[0] != 1 else keep[1]
    library_answers(lambda: todre.select_batch(E, offsets=OFFS, keep=keep), bad, "keep")


def test_batch_keep_scalar_outside_raises():
    python_refuses(lambda: todre.select_batch(E, offsets=OFFS, keep=2**63), "keep")
    out, oo = todre.select_batch(E, offsets=OFFS, keep=np.int64(3))
    assert oo.tolist() == [0, 3, 6]


# ---- contexts ------------------------------------------------------------------------

@pytest.mark.parametrize("device", [INT_MAX, INT_MIN, 1])
def test_device_inside_int_reaches_the_library(device):
    library_answers(lambda: todre.Context("cpu", device), device, "device")


@pytest.mark.parametrize("device", [2**31, INT_MIN - 1, 2**32])
def test_device_outside_int_raises(device):
    python_refuses(lambda: todre.Context("cpu", device), "device")


def test_workspace_limit_and_thread_count():
    with todre.Context("cpu", workspace_limit=I64_MAX) as ctx:
        assert ctx.get_param("workspace-limit") == I64_MAX
        python_refuses(lambda: ctx.set_param("workspace-limit", 2**63), "TODRE_CONTEXT_WORKSPACE")
        python_refuses(lambda: ctx.set_param("workspace-limit", 2**64), "TODRE_CONTEXT_WORKSPACE")
        assert ctx.get_param("workspace-limit") == I64_MAX
        library_answers(lambda: ctx.set_param("num-threads", I64_MAX), I64_MAX, "value")
        library_answers(lambda: ctx.set_param("num-threads", I64_MIN), I64_MIN, "value")
        python_refuses(lambda: ctx.set_param("num-threads", 2**64 + 4), "TODRE_CONTEXT_NUM")
        python_refuses(lambda: ctx.set_param("num-threads", I64_MIN - 1), "TODRE_CONTEXT_NUM")
        assert ctx.get_param("num-threads") == 0
    python_refuses(lambda: todre.Context("cpu", workspace_limit=2**63), "TODRE_CONTEXT_WORK")
    python_refuses(lambda: todre.Context("cpu", num_threads=2**64 + 1), "TODRE_CONTEXT_NUM")


def test_stream_handles_are_pointers():
    with todre.Context("cpu") as ctx:
        ctx.set_stream(0)
        ctx.set_stream(None)
        library_answers(lambda: ctx.set_stream(2**64 - 1), "", "stream")
        python_refuses(lambda: ctx.set_stream(2**64), "stream")  # would wrap to NULL
        python_refuses(lambda: ctx.set_stream(-1), "stream")


# ---- relevance -----------------------------------------------------------------------

@pytest.mark.parametrize("arg", ["num_layers", "batch"])
def test_layer_count_and_batch(arg):
    def make(v):
        kwargs = {"num_layers": 4, "batch": 1}
        kwargs[arg] = v
        return todre.Relevance(**kwargs)

    with make(2**20) as rel:
        assert getattr(rel, arg) == 2**20
    library_answers(lambda: make(I64_MAX), I64_MAX, arg)
    library_answers(lambda: make(I64_MIN), I64_MIN, arg)
    python_refuses(lambda: make(2**63), arg)
    python_refuses(lambda: make(2**64 + 1), arg)  # would wrap to 1
    python_refuses(lambda: make(I64_MIN - 1), arg)


@pytest.fixture
def rel():
    with todre.Relevance(8) as r:
        r.set_layout(2, 4, 4)
        yield r


def _attn():
    A = np.tril(np.ones((2, 10, 10), np.float32))
    return A / A.sum(-1, keepdims=True)


def _qk():
    r = np.random.default_rng(2)
    return (r.standard_normal((2, 10, 4)).astype(np.float32),
            r.standard_normal((1, 10, 4)).astype(np.float32))


LAYER_CALLS = {
    "observe_probs": lambda r, v: r.observe_probs(v, _attn()),
    "observe_qk": lambda r, v: r.observe_qk(v, *_qk()),
    "is_probe": lambda r, v: r.is_probe(v),
    "ratios": lambda r, v: r.ratios(v),
}
SEQ_CALLS = {
    "is_probe": lambda r, v: r.is_probe(7, seq=v),
    "ratios": lambda r, v: r.ratios(7, seq=v),
    "drop_layer": lambda r, v: r.drop_layer(seq=v),
    "keep_positions": lambda r, v: r.keep_positions(seq=v),
}


@pytest.mark.parametrize("call", list(LAYER_CALLS))
def test_layer_index(rel, call):
    fn = LAYER_CALLS[call]
    library_answers(lambda: fn(rel, I64_MAX), I64_MAX, "layer")
    library_answers(lambda: fn(rel, I64_MIN), I64_MIN, "layer")
    python_refuses(lambda: fn(rel, 2**63), "layer")
    python_refuses(lambda: fn(rel, 2**64 + 7), "layer")  # would wrap to the probe layer 7
    python_refuses(lambda: fn(rel, I64_MIN - 1), "layer")


@pytest.mark.parametrize("call", list(SEQ_CALLS))
def test_sequence_index(rel, call):
    fn = SEQ_CALLS[call]
    library_answers(lambda: fn(rel, I64_MAX), I64_MAX, "seq")
    library_answers(lambda: fn(rel, I64_MIN), I64_MIN, "seq")
    python_refuses(lambda: fn(rel, 2**63), "seq")
    python_refuses(lambda: fn(rel, 2**64), "seq")  # would wrap to sequence 0
    python_refuses(lambda: fn(rel, I64_MIN - 1), "seq")


@pytest.mark.parametrize("arg", ["n_system", "n_visual", "n_text"])
def test_layout_counts(rel, arg):
    def layout(v):
        counts = {"n_system": 2, "n_visual": 4, "n_text": 4}
        counts[arg] = v
        rel.set_layout(**counts)

    library_answers(lambda: layout(I64_MAX), I64_MAX, arg)
    python_refuses(lambda: layout(2**63), arg)
    python_refuses(lambda: layout(2**64 + 4), arg)  # would wrap to 4
    assert rel.keep_positions().tolist() == [0, 1, 6, 7, 8, 9]  # unchanged


def test_probe_layers(rel):
    library_answers(lambda: rel.set_probe_layers([I64_MAX]), I64_MAX, "layers")
    library_answers(lambda: rel.set_probe_layers([3, I64_MIN]), I64_MIN, "layers")
    for bad in ([2**63], [2**64], [3, I64_MIN - 1], np.array([2**63], np.uint64), 2**64 + 2):
        python_refuses(lambda: rel.set_probe_layers(bad), "probe_layers")
    assert rel.probe_layers == [7]
    rel.set_probe_layers(np.array([2, 5], np.uint64))
    assert rel.probe_layers == [2, 5]


def test_token_types(rel):
    with pytest.raises(TodreError) as e:
        rel.set_types([2, 1, 2**64 + 1])  # would wrap to 1, a visual token
    assert e.value.status == Status.INVALID_ARGUMENT and e.value.message.startswith("types")
    with pytest.raises(TodreError):
        rel.set_types([2, 1, I64_MAX])
    assert rel.keep_positions().tolist() == [0, 1, 6, 7, 8, 9]


def test_huge_ints_as_tau_and_scale(rel):
    python_refuses(lambda: setattr(rel, "tau", 10**400), "tau")
    python_refuses(lambda: rel.observe_qk(7, *_qk(), scale=10**400), "scale")
    assert rel.drop_layer() is None


# ---- arrays described through __array_interface__ ---------------------------------------

class _Described:
    """An object that only describes memory through __array_interface__."""

    def __init__(self, base, shape=None, strides=None, data=None):
        self._base = base
        self.__array_interface__ = {
            "version": 3, "typestr": base.dtype.str,
            "shape": tuple(base.shape if shape is None else shape),
            "strides": strides,
            "data": (base.ctypes.data if data is None else data, False)}


def test_array_interface_fields_are_range_checked():
    assert len(todre.select(_Described(E), keep=3)) == 3
    # shape 2**64 + 20 would wrap to 20 rows of the real buffer
    python_refuses(lambda: todre.select(_Described(E, shape=(2**64 + 20, 8)), keep=3),
                   "embeddings")
    python_refuses(lambda: todre.select(_Described(E, strides=(2**66 + 32, 4)), keep=3),
                   "embeddings")
    python_refuses(lambda: todre.select(_Described(E, data=2**64 + E.ctypes.data), keep=3),
                   "embeddings")
    # inside int64, the library checks the extent itself
    with pytest.raises(TodreError) as e:
        todre.select(_Described(E, strides=(2**62, 4)), keep=3)
    assert e.value.message.startswith("embeddings") and RANGE not in e.value.message


def test_ctypes_would_wrap():
    """The premise: ctypes converts modulo 2**bits without an error."""
    assert ctypes.c_int64(2**64 + 5).value == 5
    assert ctypes.c_int(2**32 + 204).value == 204
