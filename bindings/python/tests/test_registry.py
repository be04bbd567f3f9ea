"""The backend registry (todre.backends(), todre.devices()) and the parameter
model (todre.param_info(), typed set/get on every handle)."""

import dataclasses

import numpy as np
import pytest

import todre
from todre import Param, ParamType, Status, TodreError


def test_cpu_is_backend_zero_and_available():
    infos = todre.backends()
    assert infos and all(isinstance(b, todre.BackendInfo) for b in infos)
    cpu = infos[0]
    assert (cpu.index, cpu.name, cpu.path) == (0, "cpu", "")
    assert cpu.device_type == todre.DeviceType.CPU
    assert cpu.available and cpu.device_count == 1 and cpu.reason == ""
    assert [b.index for b in infos] == list(range(len(infos)))
    assert len({b.name for b in infos}) == len(infos)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cpu.name = "gpu"


def test_unavailable_backends_say_why():
    for b in todre.backends():
        if not b.available:
            assert b.reason and b.device_count == 0
            ok, reason = todre.backend_available(b.name)
            assert not ok and reason == b.reason
        else:
            assert b.device_count >= 1 and b.reason == ""
        if b.name != "cpu":
            assert b.path.endswith(".so")   # loaded from a module file


def test_available_backends_and_backend_available():
    names = todre.available_backends()
    assert names[0] == "cpu"
    assert names == [b.name for b in todre.backends() if b.available]
    assert todre.backend_available("cpu") == (True, "")
    assert todre.backend_available(todre.Backend.CPU) == (True, "")
    ok, reason = todre.backend_available("tpu")
    assert not ok and "no backend named 'tpu'" in reason and "cpu" in reason
    for bad in (None, 3, ""):
        with pytest.raises(TodreError) as e:
            todre.backend_available(bad)
        assert e.value.status == Status.INVALID_ARGUMENT and "backend" in e.value.message


def test_devices_of_the_cpu_backend():
    devs = todre.devices("cpu")
    assert len(devs) == 1
    d = devs[0]
    assert (d.backend, d.index, d.compute_capability) == ("cpu", 0, (0, 0))
    assert d.name and d.arch in ("amx", "avx512", "avx2", "generic")
    assert d.total_memory > 1 << 20 and d.cores >= 1
    every = todre.devices()
    assert every[0] == d
    assert len(every) == sum(b.device_count for b in todre.backends() if b.available)
    with pytest.raises(TodreError):
        todre.devices("tpu")


def test_param_info_of_every_parameter():
    for p in Param:
        info = todre.param_info(p)
        assert info.param == p and info.name == "TODRE_" + p.name
        assert info.min <= info.default <= info.max
    r = todre.param_info("select-ratio")
    assert (r.type, r.read_only, r.default, r.max) == (ParamType.DOUBLE, False,
                                                       pytest.approx(0.1), 1.0)
    assert 0.0 < r.min < 1e-300                # (0, 1]: the smallest positive double
    assert todre.param_info("ratio") == r
    assert todre.param_info(Param.SELECT_PIVOT).type == ParamType.INT
    assert todre.param_info(Param.RELEVANCE_NUM_LAYERS).read_only
    assert todre.param_info("TODRE_CONTEXT_WORKSPACE_LIMIT").default == 256 << 20
    for bad in (99, 299, 10_000):
        with pytest.raises(TodreError) as e:
            todre.param_info(bad)
        assert e.value.status == Status.INVALID_ARGUMENT
    with pytest.raises(TodreError):
        todre.param_info("no-such-param")


def test_select_config_params_are_typed():
    cfg = todre.SelectConfig()
    assert cfg.get("ratio") == pytest.approx(0.1) and cfg.get("keep") == 0
    cfg.set(todre.SelectParam.KEEP, 7)
    assert cfg.get(Param.SELECT_KEEP) == 7
    cfg.set("ratio", 0.25)                     # setting the ratio clears keep
    assert cfg.get("keep") == 0 and cfg.keep_count(100) == 25
    with pytest.raises(TodreError) as e:
        cfg.set("keep", 2.5)                   # an int parameter takes ints only
    assert "TODRE_SELECT_KEEP" in e.value.message
    with pytest.raises(TodreError):
        cfg.set("ratio", "half")
    with pytest.raises(TodreError):
        cfg.set("ratio", 1.5)                  # out of range: unchanged
    assert cfg.get("ratio") == pytest.approx(0.25)
    with pytest.raises(TodreError):
        cfg.set(Param.RELEVANCE_TAU, 0.5)      # another handle kind's parameter
    cfg.set("pivot", todre.Pivot.CENTER)
    cfg.reset()
    assert cfg.get("pivot") == todre.Pivot.AUTO and cfg.get("ratio") == pytest.approx(0.1)
    cfg.close()
    with pytest.raises(TodreError) as e:
        cfg.get("keep")
    assert e.value.status == Status.STATE


def test_relevance_params_and_read_only_ones():
    rel = todre.Relevance(16, batch=3)
    assert rel.get_param("num-layers") == 16 and rel.get_param("batch") == 3
    with pytest.raises(TodreError):
        rel.set_param("num-layers", 8)         # read-only
    rel.set_param("schedule", todre.Schedule.UNTIL_DROP)
    assert rel.schedule == todre.Schedule.UNTIL_DROP
    rel.tau = 0.5
    rel.reset("params")
    assert rel.schedule == todre.Schedule.LIST and rel.tau == pytest.approx(0.1)


def test_numpy_integers_are_accepted():
    cfg = todre.SelectConfig(keep=np.int64(3), seed=np.int32(5))
    assert cfg.get("keep") == 3 and cfg.get("seed") == 5
