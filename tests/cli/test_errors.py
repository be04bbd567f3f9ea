"""Every error path of `todre`: exit status 2, nothing on stdout, exactly one
line on stderr, naming what is wrong."""
import json

import numpy as np
import pytest

from conftest import assert_one_line_error


@pytest.fixture
def files(tmp_path):
    """Valid inputs plus broken variants, by name."""
    rng = np.random.default_rng(0)
    paths = {}

    def put(name, array):
        paths[name] = tmp_path / (name + ".npy")
        np.save(paths[name], array)

    def put_bytes(name, data):
        paths[name] = tmp_path / (name + ".npy")
        paths[name].write_bytes(data)

    E = rng.standard_normal((20, 8)).astype(np.float32)
    put("E", E)
    put("cls", rng.random(20).astype(np.float32))
    put("cls19", rng.random(19).astype(np.float32))
    put("cls3d", rng.random((2, 2, 5)).astype(np.float32))
    put("E_f64", E.astype(np.float64))
    put("E_i32", (E * 10).astype(np.int32))
    put("E_be", E.astype(">f4"))
    put("E_fortran", np.asfortranarray(E))
    put("E_1d", E[:, 0].copy())
    put("E_3d", E.reshape(20, 2, 4))
    put("E_empty", np.zeros((0, 8), np.float32))
    put("E_d0", np.zeros((5, 0), np.float32))
    bad = E.copy()
    bad[3, 2] = np.nan
    put("E_nan", bad)
    bad = E.copy()
    bad[7, 0] = np.inf
    put("E_inf", bad)
    cls_inf = rng.random(20).astype(np.float32)
    cls_inf[4] = np.inf
    put("cls_inf", cls_inf)
    good = paths["E"].read_bytes()
    put_bytes("E_trunc", good[:-10])
    put_bytes("E_garbage", b"\x93NUMPY\x01\x00\x20\x00{'descr': <f4, shape: (((}\n   ")
    put_bytes("E_text", b"this is not a numpy file\n")
    put_bytes("E_hdrlen", good[:8] + b"\xff\xff" + good[10:])

    types = np.array([0] * 3 + [1] * 10 + [2] * 5)
    K = len(types)
    A = rng.random((2, K, K)).astype(np.float32)
    A /= A.sum(axis=2, keepdims=True)
    put("A", A)
    put("A_f64", A.astype(np.float64))
    put("A_4d", A[None])
    put("A_K17", A[:, :, :17].copy())
    A_nan = A.copy()
    A_nan[1, 5, 2] = np.nan
    put("A_nan", A_nan)
    put("T", types)
    put("T_float", types.astype(np.float32))
    put("T_bool", types > 0)
    put("T_2d", types.reshape(1, K))
    put("T_bad3", np.where(types == 2, 3, types))
    put("T_neg", np.where(types == 0, -1, types))
    put("T_short", types[:-1])
    put("Q", rng.standard_normal((4, K, 8)).astype(np.float32))
    put("Kk", rng.standard_normal((2, K, 8)).astype(np.float32))
    put("K3", rng.standard_normal((3, K, 8)).astype(np.float32))
    put("K_dh6", rng.standard_normal((2, K, 6)).astype(np.float32))
    put("K_f16", rng.standard_normal((2, K, 8)).astype(np.float16))
    put("Q_long", rng.standard_normal((4, K + 2, 8)).astype(np.float32))
    paths["missing"] = tmp_path / "does-not-exist.npy"
    paths["dir"] = tmp_path
    return paths


SEL = ["select", "--embeddings", "{E}"]
REL = ["relevance", "--attn", "{A}", "--types", "{T}"]
FUSED = ["relevance", "--q", "{Q}", "--k", "{Kk}", "--types", "{T}"]

CASES = {
    # usage
    "no command": ([], "no command"),
    "unknown command": (["frobnicate"], "unknown command"),
    "select no args": (["select"], "--embeddings"),
    "unknown option": (SEL + ["--keep", "3", "--bogus", "1"], "--bogus"),
    "single dash": (SEL + ["-k", "3"], "-k"),
    "positional": (SEL + ["--keep", "3", "extra"], "extra"),
    "missing value at end": (SEL + ["--keep"], "--keep"),
    "value is an option": (SEL + ["--keep", "--json"], "--keep"),
    "flag with value": (SEL + ["--keep", "3", "--json=yes"], "--json"),
    "duplicate option": (SEL + ["--keep", "3", "--keep", "4"], "more than once"),
    "keep and ratio": (SEL + ["--keep", "3", "--ratio", "0.5"], "--ratio"),
    "neither keep nor ratio": (SEL, "--keep"),
    # numbers
    "keep suffix": (SEL + ["--keep", "5x"], "--keep"),
    "keep empty": (SEL + ["--keep="], "--keep"),
    "keep blank": (SEL + ["--keep", " 5"], "--keep"),
    "keep plus": (SEL + ["--keep", "+5"], "--keep"),
    "keep float": (SEL + ["--keep", "1e1"], "--keep"),
    "keep overflow": (SEL + ["--keep", "99999999999999999999"], "--keep"),
    "keep 2^63": (SEL + ["--keep", "9223372036854775808"], "--keep"),
    "keep zero": (SEL + ["--keep", "0"], "--keep"),
    "keep negative": (SEL + ["--keep", "-3"], "--keep"),
    "keep above n": (SEL + ["--keep", "21"], "keep"),
    "ratio word": (SEL + ["--ratio", "half"], "--ratio"),
    "ratio nan": (SEL + ["--ratio", "nan"], "--ratio"),
    "ratio inf": (SEL + ["--ratio", "inf"], "--ratio"),
    "ratio huge": (SEL + ["--ratio", "1e999"], "--ratio"),
    "ratio zero": (SEL + ["--ratio", "0"], "ratio"),
    "ratio above one": (SEL + ["--ratio", "1.5"], "ratio"),
    "ratio negative": (SEL + ["--ratio", "-0.1"], "ratio"),
    "ratio trailing": (SEL + ["--ratio", "0.1,"], "--ratio"),
    "seed float": (SEL + ["--keep", "3", "--seed", "1.5"], "--seed"),
    "seed overflow": (SEL + ["--keep", "3", "--seed", "9223372036854775808"], "--seed"),
    # choices and ranges
    "objective": (SEL + ["--keep", "3", "--objective", "max-avg"], "--objective"),
    "pivot": (SEL + ["--keep", "3", "--pivot", "first"], "--pivot"),
    "order": (SEL + ["--keep", "3", "--order", "random"], "--order"),
    "backend": (SEL + ["--keep", "3", "--backend", "tpu"], "--backend"),
    "range no colon": (SEL + ["--keep", "3", "--pivot-range", "5"], "--pivot-range"),
    "range no lo": (SEL + ["--keep", "3", "--pivot-range", ":5"], "--pivot-range"),
    "range words": (SEL + ["--keep", "3", "--pivot-range", "a:b"], "--pivot-range"),
    "range reversed": (SEL + ["--keep", "3", "--pivot-range", "10:5"], "pivot"),
    "range empty": (SEL + ["--keep", "3", "--pivot-range", "5:5"], "pivot"),
    "range beyond n": (SEL + ["--keep", "3", "--pivot-range", "0:100"], "pivot"),
    "range negative": (SEL + ["--keep", "3", "--pivot-range", "-2:5"], "pivot"),
    "range lo 2^63": (SEL + ["--keep", "3", "--pivot-range", "9223372036854775808:5"], "--pivot-range"),
    "range hi 2^64": (SEL + ["--keep", "3", "--pivot-range", "0:18446744073709551616"], "--pivot-range"),
    "cls pivot without cls": (SEL + ["--keep", "3", "--pivot", "cls"], "cls"),
    "cls-topk without cls": (SEL + ["--keep", "3", "--objective", "cls-topk"], "cls"),
    "cls wrong length": (SEL + ["--keep", "3", "--cls", "{cls19}"], "cls"),
    "cls rank 3": (SEL + ["--keep", "3", "--cls", "{cls3d}"], "--cls"),
    "cls inf": (SEL + ["--keep", "3", "--cls", "{cls_inf}"], "NONFINITE"),
    # files
    "missing file": (["select", "--embeddings", "{missing}", "--keep", "3"], "does-not-exist"),
    "directory": (["select", "--embeddings", "{dir}", "--keep", "3"], "--embeddings"),
    "float64": (["select", "--embeddings", "{E_f64}", "--keep", "3"], "<f8"),
    "int32": (["select", "--embeddings", "{E_i32}", "--keep", "3"], "<i4"),
    "big endian": (["select", "--embeddings", "{E_be}", "--keep", "3"], ">f4"),
    "fortran order": (["select", "--embeddings", "{E_fortran}", "--keep", "3"], "Fortran"),
    "rank 1": (["select", "--embeddings", "{E_1d}", "--keep", "1"], "rank 1"),
    "rank 3": (["select", "--embeddings", "{E_3d}", "--keep", "1"], "rank 3"),
    "no rows": (["select", "--embeddings", "{E_empty}", "--ratio", "0.5"], "embeddings"),
    "no columns": (["select", "--embeddings", "{E_d0}", "--keep", "1"], "embeddings"),
    "nan": (["select", "--embeddings", "{E_nan}", "--keep", "3"], "NONFINITE"),
    "inf": (["select", "--embeddings", "{E_inf}", "--keep", "3"], "NONFINITE"),
    "truncated": (["select", "--embeddings", "{E_trunc}", "--keep", "3"], "truncated"),
    "malformed header": (["select", "--embeddings", "{E_garbage}", "--keep", "3"], "E_garbage"),
    "not npy": (["select", "--embeddings", "{E_text}", "--keep", "3"], "magic"),
    "header length": (["select", "--embeddings", "{E_hdrlen}", "--keep", "3"], "E_hdrlen"),
    # relevance
    "relevance no form": (["relevance", "--types", "{T}"], "--attn"),
    "relevance no types": (["relevance", "--attn", "{A}"], "--types"),
    "attn and q": (REL + ["--q", "{Q}"], "--attn"),
    "q without k": (["relevance", "--q", "{Q}", "--types", "{T}"], "--k"),
    "scale with attn": (REL + ["--scale", "1"], "--scale"),
    "scale zero": (FUSED + ["--scale", "0"], "--scale"),
    "scale negative": (FUSED + ["--scale", "-1"], "--scale"),
    "scale word": (FUSED + ["--scale", "big"], "--scale"),
    "tau above one": (REL + ["--tau", "1.5"], "tau"),
    "tau negative": (REL + ["--tau", "-0.1"], "tau"),
    "tau word": (REL + ["--tau", "low"], "--tau"),
    "types float": (["relevance", "--attn", "{A}", "--types", "{T_float}"], "--types"),
    "types bool": (["relevance", "--attn", "{A}", "--types", "{T_bool}"], "--types"),
    "types 2d": (["relevance", "--attn", "{A}", "--types", "{T_2d}"], "--types"),
    "types value 3": (["relevance", "--attn", "{A}", "--types", "{T_bad3}"], "value 3"),
    "types value -1": (["relevance", "--attn", "{A}", "--types", "{T_neg}"], "value -1"),
    "types length": (["relevance", "--attn", "{A}", "--types", "{T_short}"], "--types"),
    "attn keys": (["relevance", "--attn", "{A_K17}", "--types", "{T}"], "--types"),
    "attn rank 4": (["relevance", "--attn", "{A_4d}", "--types", "{T}"], "--attn"),
    "attn float64": (["relevance", "--attn", "{A_f64}", "--types", "{T}"], "<f8"),
    "attn nan": (["relevance", "--attn", "{A_nan}", "--types", "{T}"], "NONFINITE"),
    "attn missing": (["relevance", "--attn", "{missing}", "--types", "{T}"], "--attn"),
    "gqa mismatch": (["relevance", "--q", "{Q}", "--k", "{K3}", "--types", "{T}"], "--q/--k"),
    "head dim": (["relevance", "--q", "{Q}", "--k", "{K_dh6}", "--types", "{T}"], "--q/--k"),
    "mixed dtypes": (["relevance", "--q", "{Q}", "--k", "{K_f16}", "--types", "{T}"], "--q/--k"),
    "more queries than keys": (["relevance", "--q", "{Q_long}", "--k", "{Kk}", "--types", "{T}"],
                               "--q/--k"),
    # info
    "info option": (["info", "--verbose"], "--verbose"),
    "info json value": (["info", "--json=1"], "--json"),
    "version extra": (["--version", "x"], "--version"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_error(cli, files, name):
    argv, needle = CASES[name]
    res = cli(*[a.format(**files) for a in argv])
    assert_one_line_error(res)
    assert needle in res.err, res.err


def test_explicit_cuda_is_an_error_only_where_it_cannot_run(cli, files):
    info = json.loads(cli("info", "--json").ok())
    res = cli("select", "--embeddings", files["E"], "--keep", "3", "--backend", "cuda", "--json")
    # "cuda" is listed only where its module was found (TODRE_BACKEND_PATH or
    # the library's directories); where it is not, naming it is an error too
    if info["backends"].get("cuda", {}).get("available", False):
        assert json.loads(res.ok())["backend"] == "cuda"
    else:
        assert_one_line_error(res)
        assert "cuda" in res.err.lower()


def test_help_goes_to_stdout(cli):
    for argv in (["--help"], ["help"], ["select", "--help"], ["relevance", "-h"]):
        res = cli(*argv)
        assert res.rc == 0 and res.err == ""
        assert "todre select" in res.out and "todre relevance" in res.out
