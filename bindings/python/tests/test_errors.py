"""Bad input raises TodreError with the status and a message naming the argument;
never a crash."""

import numpy as np
import pytest
import torch

import todre
from todre import Status, TodreError

E = np.random.default_rng(0).standard_normal((20, 8)).astype(np.float32)
A = np.random.default_rng(1).random(20).astype(np.float32)

CASES = [
    # (description, kwargs for select, expected status, word in the message)
    ("keep above n", dict(embeddings=E, keep=21), Status.INVALID_ARGUMENT, "keep"),
    ("keep zero", dict(embeddings=E, keep=0), Status.INVALID_ARGUMENT, "keep"),
    ("keep negative", dict(embeddings=E, keep=-3), Status.INVALID_ARGUMENT, "keep"),
    ("keep float", dict(embeddings=E, keep=2.5), Status.INVALID_ARGUMENT, "keep"),
    ("keep list", dict(embeddings=E, keep=[2, 3]), Status.INVALID_ARGUMENT, "keep"),
    ("ratio zero", dict(embeddings=E, ratio=0.0), Status.INVALID_ARGUMENT, "ratio"),
    ("ratio above one", dict(embeddings=E, ratio=1.5), Status.INVALID_ARGUMENT, "ratio"),
    ("ratio nan", dict(embeddings=E, ratio=float("nan")), Status.INVALID_ARGUMENT, "ratio"),
    ("ratio text", dict(embeddings=E, ratio="half"), Status.INVALID_ARGUMENT, "ratio"),
    ("keep and ratio", dict(embeddings=E, keep=2, ratio=0.5), Status.INVALID_ARGUMENT,
     "keep"),
    ("nan embedding", dict(embeddings=np.where(np.arange(160).reshape(20, 8) == 77, np.nan,
                                               E).astype(np.float32), keep=2),
     Status.NONFINITE, ""),
    ("inf cls", dict(embeddings=E, cls=np.where(np.arange(20) == 3, np.inf, A).astype(
        np.float32), keep=2, pivot="cls"), Status.NONFINITE, ""),
    ("float64", dict(embeddings=E.astype(np.float64), keep=2), Status.INVALID_ARGUMENT,
     "embeddings"),
    ("int32", dict(embeddings=E.astype(np.int32), keep=2), Status.INVALID_ARGUMENT, ""),
    ("rank 1", dict(embeddings=E[0], keep=2), Status.INVALID_ARGUMENT, "embeddings"),
    ("rank 3", dict(embeddings=E.reshape(2, 10, 8), keep=2), Status.INVALID_ARGUMENT,
     "embeddings"),
    ("n = 0", dict(embeddings=E[:0], keep=1), Status.INVALID_ARGUMENT, ""),
    ("d = 0", dict(embeddings=E[:, :0], keep=1), Status.INVALID_ARGUMENT, ""),
    ("inner stride", dict(embeddings=E[:, ::2], keep=2), Status.INVALID_ARGUMENT,
     "embeddings"),
    ("fortran order", dict(embeddings=np.asfortranarray(E), keep=2),
     Status.INVALID_ARGUMENT, "embeddings"),
    ("objective", dict(embeddings=E, keep=2, objective="max-avg"), Status.INVALID_ARGUMENT,
     "objective"),
    ("pivot", dict(embeddings=E, keep=2, pivot="middle"), Status.INVALID_ARGUMENT, "pivot"),
    ("order", dict(embeddings=E, keep=2, order="random"), Status.INVALID_ARGUMENT, "order"),
    ("pivot range beyond n", dict(embeddings=E, keep=2, pivot_range=(5, 30)),
     Status.INVALID_ARGUMENT, "pivot"),
    ("pivot range empty", dict(embeddings=E, keep=2, pivot_range=(5, 5)),
     Status.INVALID_ARGUMENT, "pivot"),
    ("pivot range shape", dict(embeddings=E, keep=2, pivot_range=5), Status.INVALID_ARGUMENT,
     "pivot_range"),
    ("pivot range negative", dict(embeddings=E, keep=2, pivot_range=(-1, 4)),
     Status.INVALID_ARGUMENT, "pivot"),
    ("cls pivot without cls", dict(embeddings=E, keep=2, pivot="cls"),
     Status.INVALID_ARGUMENT, "cls"),
    ("cls-topk without cls", dict(embeddings=E, keep=2, objective="cls-topk"),
     Status.INVALID_ARGUMENT, "cls"),
    ("cls wrong length", dict(embeddings=E, keep=2, cls=A[:19]), Status.INVALID_ARGUMENT,
     "cls"),
    ("cls dtype", dict(embeddings=E, keep=2, cls=A.astype(np.float64)),
     Status.INVALID_ARGUMENT, "cls"),
    ("seed float", dict(embeddings=E, keep=2, seed=1.5), Status.INVALID_ARGUMENT, "seed"),
    ("not an array", dict(embeddings="tokens", keep=2), Status.INVALID_ARGUMENT,
     "embeddings"),
    ("None", dict(embeddings=None, keep=2), Status.INVALID_ARGUMENT, "embeddings"),
    ("ragged list", dict(embeddings=[[1.0, 2.0], [3.0]], keep=1), Status.INVALID_ARGUMENT,
     "embeddings"),
    ("backend", dict(embeddings=E, keep=2, backend=3), Status.INVALID_ARGUMENT, "backend"),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bad_select_input_raises(case):
    _, kwargs, status, word = case
    with pytest.raises(TodreError) as e:
        todre.select(**kwargs)
    assert e.value.status == status
    assert e.value.message
    assert word.lower() in e.value.message.lower()
    assert str(e.value).startswith("TODRE_ERR_")


def test_unregistered_backend_is_an_error_naming_it():
    with pytest.raises(TodreError) as e:
        todre.select(E, keep=2, backend="tpu")
    assert e.value.status in (Status.BACKEND_UNAVAILABLE, Status.INVALID_ARGUMENT)
    assert "tpu" in e.value.message


def test_cuda_backend_for_host_data_is_an_error():
    with pytest.raises(TodreError) as e:
        todre.select(E, keep=2, backend="cuda")
    assert e.value.status in (Status.BACKEND_UNAVAILABLE, Status.INVALID_ARGUMENT)


def test_read_only_input_is_fine_read_only_output_never_needed():
    ro = E.copy()
    ro.flags.writeable = False
    assert todre.select(ro, keep=3).tolist() == todre.select(E, keep=3).tolist()


def test_meta_tensor_is_refused():
    with pytest.raises(TodreError):
        todre.select(torch.empty(10, 4, device="meta"), keep=2)


def test_error_carries_status_name_and_message():
    with pytest.raises(TodreError) as e:
        todre.select(E, keep=99)
    err = e.value
    assert err.status == Status.INVALID_ARGUMENT and err.status == 1
    assert err.status_name == "TODRE_ERR_INVALID_ARGUMENT"
    assert "keep" in err.message and err.message in str(err)


def test_library_still_works_after_errors():
    for case in CASES:
        try:
            todre.select(**case[1])
        except TodreError:
            pass
    assert todre.select(E, keep=3).shape == (3,)
