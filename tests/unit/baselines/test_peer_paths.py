"""Names from data (group ids) are sanitised where they become paths: ``../`` never leaves the work dir, two
names never share a path, and ordinary ids keep the file names they always had."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

from mnemis.paths import child_path, safe_name

HOSTILE = ["../evil", "..", ".", "", "a/b", "a\\b", "/etc/passwd", "x" * 300, "sp ace", "nul\x00byte", ".hidden",
           "~", "../../..", "conv-26/../../x"]


def test_ordinary_names_are_kept_and_hostile_ones_stay_one_component(tmp_path):
    for name in ("conv-26", "gpt4_2655b836_abs", "e47becba", "Qwen2.5-7B", "q_1.2"):
        assert safe_name(name) == name
    made = [safe_name(n) for n in HOSTILE]
    assert len(set(made)) == len(HOSTILE)  # no two names share a path
    for name, safe in zip(HOSTILE, made):
        assert "/" not in safe and "\\" not in safe and "\x00" not in safe and len(safe) <= 64, (name, safe)
        assert safe not in (".", "..", "") and not safe.startswith("."), (name, safe)
        assert (tmp_path / safe).resolve().parent == tmp_path.resolve()
        assert child_path(tmp_path, name, ".done.json").parent == tmp_path
    assert safe_name("conv-26", hashed=True) != "conv-26"
    with pytest.raises(ValueError):
        child_path(tmp_path, "g", "/../x")


def test_the_mem0_peer_keeps_a_hostile_group_inside_its_work_dir(tmp_path, monkeypatch):
    """The peer's per-group folder, FAISS collection and history database (mem0ai stubbed: the real library
    runs in test_peers.py where installed)."""
    pytest.importorskip("openai")
    made = {}

    class FakeMem0:
        @classmethod
        def from_config(cls, config):
            made["config"] = config
            mem = cls()
            mem.llm = types.SimpleNamespace(client=None)
            return mem

    monkeypatch.setitem(sys.modules, "mem0", types.SimpleNamespace(Memory=FakeMem0))
    monkeypatch.setenv("MEM0_DIR", str(tmp_path / "work" / "mem0-home"))
    from mnemis.baselines.peers.mem0_peer import _memory
    from mnemis.models.embed import HashingEmbedder
    from tests.helpers.compose import run_settings

    work = tmp_path / "work"
    for group in ("../evil", "conv-26"):
        _memory(group, run_settings([]).peers, "http://127.0.0.1:9/v1", "m", HashingEmbedder(8), 8, work)
        store = made["config"]["vector_store"]["config"]
        for p in (store["path"], made["config"]["history_db_path"]):
            assert Path(p).resolve().is_relative_to(work.resolve()), p
        assert "/" not in store["collection_name"] and ".." != store["collection_name"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["work"]  # nothing outside the work dir
    assert (work / "conv-26").is_dir()  # an ordinary id keeps its folder name
