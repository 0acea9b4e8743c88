"""BEAM's files and the large LongMemEval-M file: pinned or recorded sums, streamed fetches from a local mirror."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from mnemis.data import beam_files, sources
from mnemis.data.errors import DataError
from mnemis.app.data_command import data_command
from mnemis.data.sources import DataDirs, fetch, stream_to
from tests.helpers.localserve import serve

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "beam" / "100K"
SHARED = Path(__file__).resolve().parents[3].parent / "shared" / "data"


def _mirror_files(scale: str) -> dict[str, bytes]:
    return {f"beam/{scale}/{n}/{name}": (FIX / str(n) / name).read_bytes()
            for n in (1, 2) for name in ("chat.json", "probing_questions.json")}


@pytest.fixture
def two_convs(monkeypatch):
    monkeypatch.setitem(beam_files.COUNTS, "1M", 2)
    monkeypatch.setitem(beam_files.COUNTS, "100K", 2)
    monkeypatch.delenv("MNEMIS_DATA_MIRROR", raising=False)


def test_upstream_urls_are_pinned():
    url = beam_files._source("10M", 3, "probing_questions.json", None)
    assert url == ("https://raw.githubusercontent.com/mohammadtavakoli78/BEAM/b2a3ee8ba12d68f83143dda191097dc3e028ddd3/"
                   "chats/10M/3/probing_questions/probing_questions.json")
    assert beam_files.scale_key("beam") == "100K" and beam_files.scale_key("beam_10M") == "10M"
    assert beam_files.scale_key("beam_2M") is None and len(beam_files.PINNED["100K"]) == 40


def test_unpinned_scale_records_its_sums_and_checks_them(tmp_path, two_convs):
    dirs = DataDirs(tmp_path / "home", (tmp_path / "home",))
    with serve(_mirror_files("1M")) as url:
        folder = beam_files.fetch_scale("1M", dirs, mirror=url, out=lambda s: None)
    assert folder == tmp_path / "home" / "beam" / "1M"
    sums = beam_files.parse_sums((folder / "SHA256SUMS").read_text())
    assert set(sums) == {"1/chat.json", "1/probing_questions.json", "2/chat.json", "2/probing_questions.json"}
    assert sums["1/chat.json"] == hashlib.sha256((FIX / "1" / "chat.json").read_bytes()).hexdigest()
    assert beam_files.verify_scale("1M", folder) == (True, "sha256 ok")
    assert beam_files.find_scale("1M", dirs) == folder
    (folder / "2" / "chat.json").write_text("[]")
    ok, msg = beam_files.verify_scale("1M", folder)
    assert not ok and "sha256 mismatch for 2/chat.json" in msg
    with serve(_mirror_files("1M")) as url, pytest.raises(DataError, match="2/chat.json: sha256 mismatch"):
        beam_files.fetch_scale("1M", dirs, mirror=url, out=lambda s: None)


def test_pinned_scale_refuses_other_bytes_and_leaves_nothing(tmp_path, two_convs):
    dirs = DataDirs(tmp_path / "home", (tmp_path / "home",))
    with serve(_mirror_files("100K")) as url, pytest.raises(DataError, match="sha256 mismatch"):
        beam_files.fetch_scale("100K", dirs, mirror=url, out=lambda s: None)
    assert not list((tmp_path / "home").rglob("*.json"))  # the temp file is removed, nothing renamed


def test_mirror_folder_and_the_fetch_command(tmp_path, two_convs, monkeypatch, capsys):
    mirror = tmp_path / "mirror"
    for rel, body in _mirror_files("1M").items():
        (mirror / rel).parent.mkdir(parents=True, exist_ok=True)
        (mirror / rel).write_bytes(body)
    monkeypatch.setenv("MNEMIS_DATA_DIR", str(tmp_path / "home"))
    monkeypatch.setenv("MNEMIS_DATA_MIRROR", str(mirror))
    assert data_command(["fetch", "beam_1M"]) == 0
    assert (tmp_path / "home" / "beam" / "1M" / "2" / "probing_questions.json").is_file()
    assert data_command(["fetch", "beam_1M"]) == 0 and "present at" in capsys.readouterr().out
    assert data_command(["list"]) == 0
    out = capsys.readouterr().out
    assert "beam_1M" in out and "ok" in out.split("beam_1M")[1].splitlines()[0]


def test_shared_100k_matches_the_pins(require_data):
    folder = require_data(SHARED / "beam" / "100K", "BEAM 100K")
    assert beam_files.verify_scale("100K", folder) == (True, "sha256 ok")
    assert beam_files.locate_scale("100K", fetch_missing=False) == folder


def test_stream_to_refuses_a_short_body_and_a_wrong_sum(tmp_path):
    body = b"x" * 5000
    with serve({"f.json": body}) as url:
        with pytest.raises(DataError, match=r"truncated|download failed"):
            stream_to(url + "/truncated/f.json", tmp_path / "f.json", None, out=lambda s: None)
        with pytest.raises(DataError, match="sha256 mismatch"):
            stream_to(url + "/f.json", tmp_path / "f.json", "0" * 64, out=lambda s: None)
        assert list(tmp_path.iterdir()) == []
        _, n = stream_to(url + "/f.json", tmp_path / "f.json", hashlib.sha256(body).hexdigest(), out=lambda s: None)
    assert n == 5000 and (tmp_path / "f.json").read_bytes() == body


def test_longmemeval_m_is_streamed_and_its_sum_recorded(tmp_path, monkeypatch):
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    shutil.copy(Path(__file__).resolve().parents[2] / "fixtures" / "longmemeval_mini.json",
                mirror / "longmemeval_m_cleaned.json")
    dirs = DataDirs(tmp_path / "home", (tmp_path / "home",))
    path = fetch("longmemeval_m", dirs, mirror=str(mirror), out=lambda s: None)
    rec = path.with_name("longmemeval_m_cleaned.json.sha256").read_text().split()[0]
    assert rec == hashlib.sha256(path.read_bytes()).hexdigest()
    assert sources.verify(sources.SOURCES["longmemeval_m"], path)[0]
    assert "longmemeval_m" in sources.NOT_IN_ALL and sources.SOURCES["longmemeval_m"].stream
