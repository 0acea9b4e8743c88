"""Split-GGUF models from PyPI: parts located without import, assembled once, checked against pinned
size / sha256 / GGUF identity, with clear errors on any mismatch (tiny synthetic GGUF, no real model)."""

from __future__ import annotations

import dataclasses
import hashlib

import numpy as np
import pytest

from mnemis.models import split_gguf
from mnemis.models.split_gguf import ModelIntegrityError, SplitGGUF, assembled_gguf, part_paths

gguf = pytest.importorskip("gguf")


def _tiny_gguf(path, name="Tiny Chat", arch="qwen2"):
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name(name)
    w.add_tensor("a", np.arange(16, dtype=np.float32).reshape(4, 4))
    w.add_tensor("b", np.ones(8, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path.read_bytes()


@pytest.fixture
def split_model(tmp_path, monkeypatch):
    """Three packages tinysplit_part1..3 holding data/part0N.bin; their __init__ raises if imported."""
    blob = _tiny_gguf(tmp_path / "whole.gguf")
    site = tmp_path / "site"
    cuts = [0, 100, 200, len(blob)]
    for i in range(1, 4):
        pkg = site / f"tinysplit_part{i}"
        (pkg / "data").mkdir(parents=True)
        (pkg / "__init__.py").write_text("raise RuntimeError('part packages must never be imported')\n")
        (pkg / "data" / f"part{i:02d}.bin").write_bytes(blob[cuts[i - 1]:cuts[i]])
    monkeypatch.syspath_prepend(str(site))
    spec = SplitGGUF(name="tiny-split", dirname="tiny-split-instruct", pip_prefix="tinysplit-part", version="1.0",
                     n_parts=3, size=len(blob), sha256=hashlib.sha256(blob).hexdigest(), architecture="qwen2",
                     general_name="Tiny Chat", n_tensors=2)
    return spec, blob, site


def test_parts_are_assembled_in_numeric_order_and_verified(split_model, tmp_path):
    spec, blob, _ = split_model
    assert [p.name for p in part_paths(spec)] == ["part01.bin", "part02.bin", "part03.bin"]
    path = assembled_gguf(spec, tmp_path / "cache")
    assert path.read_bytes() == blob and path.name == "tiny-split-instruct.gguf"
    assert (tmp_path / "cache" / "tiny-split-instruct.gguf.sha256").read_text().strip() == spec.sha256
    assert spec.pip_specs() == ["tinysplit-part1==1.0", "tinysplit-part2==1.0", "tinysplit-part3==1.0"]


def test_assembly_happens_once(split_model, tmp_path, monkeypatch):
    spec, _, _ = split_model
    first = assembled_gguf(spec, tmp_path / "cache")
    monkeypatch.setattr(split_gguf, "part_paths", lambda s: pytest.fail("reassembled a verified file"))
    assert assembled_gguf(spec, tmp_path / "cache") == first


@pytest.mark.parametrize("change,message", [
    ({"sha256": "0" * 64}, "sha256 of tiny-split-instruct.gguf is"),
    ({"size": 1}, "bytes, expected 1"),
    ({"general_name": "Other Model"}, "name='Tiny Chat'"),
    ({"architecture": "llama"}, "architecture='qwen2'"),
    ({"n_tensors": 3}, "tensors=2"),
])
def test_any_mismatch_stops_with_a_clear_error_and_leaves_no_file(split_model, tmp_path, change, message):
    spec, _, _ = split_model
    bad = dataclasses.replace(spec, **change)
    with pytest.raises(ModelIntegrityError, match="tiny-split") as err:
        assembled_gguf(bad, tmp_path / "cache")
    assert message in str(err.value)
    assert [p.name for p in (tmp_path / "cache").iterdir() if not p.name.endswith(".lock")] == []


def test_a_swapped_part_is_caught(split_model, tmp_path):
    spec, _, site = split_model
    p1, p2 = site / "tinysplit_part1" / "data" / "part01.bin", site / "tinysplit_part2" / "data" / "part02.bin"
    a, b = p1.read_bytes(), p2.read_bytes()
    p1.write_bytes(b), p2.write_bytes(a)
    with pytest.raises(ModelIntegrityError, match="sha256"):
        assembled_gguf(spec, tmp_path / "cache")


def test_missing_part_package_names_it_and_the_setup_command(split_model, tmp_path):
    spec, _, _ = split_model
    more = dataclasses.replace(spec, n_parts=4)
    with pytest.raises(FileNotFoundError, match=r"1 of 4 part packages .*tinysplit-part4.*make setup-cpu-small"):
        part_paths(more)


def test_not_a_gguf_is_an_integrity_error(tmp_path):
    junk = tmp_path / "x.gguf"
    junk.write_bytes(b"not a gguf at all" * 10)
    with pytest.raises(ModelIntegrityError, match="not a readable GGUF"):
        split_gguf.gguf_identity(junk)


def test_registry_pins_both_models_and_packaged_model_ignores_other_names():
    from mnemis.models.packaged import packaged_model

    m15, m05 = split_gguf.SPLIT_MODELS["qwen2.5-coder-1.5b"], split_gguf.SPLIT_MODELS["qwen2.5-coder-0.5b"]
    assert (m15.n_parts, m15.size, m15.n_tensors) == (22, 1_117_320_768, 339)
    assert (m05.n_parts, m05.n_tensors) == (6, 291) and len(m05.sha256) == len(m15.sha256) == 64
    assert packaged_model("Qwen/Qwen3-8B") is None and packaged_model("./some/folder") is None
