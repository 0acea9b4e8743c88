"""Which weights embed queries: the resolution rules (the int8 model itself is tested in integration)."""

import pytest

from mnemis.models.embed import resolve_query_precision


@pytest.mark.parametrize(("asked", "device", "got"), [
    ("auto", "cpu", "int8"), ("auto", "cuda", "same"), ("auto", "cuda:1", "same"),
    ("same", "cpu", "same"), ("bfloat16", "cuda", "bfloat16"), ("int8", "cpu", "int8"),
])
def test_resolution(asked, device, got):
    assert resolve_query_precision(asked, device) == got


def test_int8_on_gpu_is_refused_with_the_reason():
    with pytest.raises(ValueError, match="query_precision=int8 needs device=cpu"):
        resolve_query_precision("int8", "cuda")


def test_unknown_precision_names_the_choices():
    with pytest.raises(ValueError, match="auto, same, int8, bfloat16.*'fp8'"):
        resolve_query_precision("fp8", "cpu")
