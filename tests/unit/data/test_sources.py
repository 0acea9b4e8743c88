"""``mnemis data fetch``: pinned files fetched from a local HTTP server on 127.0.0.1 only, checked, written atomically."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mnemis.data import sources
from mnemis.data.errors import DataError
from mnemis.data.sources import DataDirs, Source, Upstream, fetch, locate, reshape_judge_stress
from mnemis.settings import PathsSettings
from tests.helpers.localserve import closed_port_url, serve

REPO = Path(__file__).resolve().parents[3]
SHARED = REPO.parent / "shared" / "data"
BODY = b'[{"hello": "world"}]'
SHA = hashlib.sha256(BODY).hexdigest()


@pytest.fixture
def fake_source(monkeypatch):
    src = Source("fake", "fake.json", SHA, (Upstream("unused", SHA),), "CC0", "a test file")
    monkeypatch.setitem(sources.SOURCES, "fake", src)
    monkeypatch.delenv("MNEMIS_DATA_MIRROR", raising=False)
    return src


def _dirs(tmp_path: Path) -> DataDirs:
    return DataDirs(tmp_path / "home", (tmp_path / "home",))


def _left(tmp_path: Path) -> list[str]:
    home = tmp_path / "home"
    return sorted(p.name for p in home.iterdir()) if home.exists() else []


def test_fetch_from_a_mirror_url_and_through_a_redirect(tmp_path, fake_source):
    lines: list[str] = []
    with serve({"fake.json": BODY}) as url:
        path = fetch("fake", _dirs(tmp_path), mirror=url, out=lines.append)
        assert path.read_bytes() == BODY
        path.unlink()
        path = fetch("fake", _dirs(tmp_path), mirror=url + "/redirect", out=lines.append)
    assert path.read_bytes() == BODY and _left(tmp_path) == ["fake.json"]
    assert any("licence: CC0" in line for line in lines)


def test_truncated_body_leaves_no_file(tmp_path, fake_source):
    with serve({"fake.json": BODY}) as url, pytest.raises(DataError, match=r"truncated|download failed"):
        fetch("fake", _dirs(tmp_path), mirror=url + "/truncated", out=lambda s: None)
    assert _left(tmp_path) == []


def test_wrong_checksum_names_file_and_both_hashes(tmp_path, fake_source):
    bad = b'[{"hello": "moon"}]'
    with serve({"fake.json": bad}) as url, pytest.raises(DataError) as err:
        fetch("fake", _dirs(tmp_path), mirror=url, out=lambda s: None)
    msg = str(err.value)
    assert "fake.json" in msg and SHA in msg and hashlib.sha256(bad).hexdigest() in msg
    assert _left(tmp_path) == []


def test_unreachable_mirror_is_a_clear_error(tmp_path, fake_source):
    with pytest.raises(DataError, match="download failed"):
        fetch("fake", _dirs(tmp_path), mirror=closed_port_url(), out=lambda s: None)
    assert _left(tmp_path) == []


def test_upstreams_are_checked_then_derived(tmp_path, monkeypatch):
    v1 = {"detailed_results": {"u0": [{"question_id": "q0", "question": "Q?", "golden_answer": "A",
                                       "generated_answer": "B", "category": "2"}]}}
    v2 = {"detailed_results": {"u0": [{"question_id": "q0", "generated_answer": "maybe"}]}}
    b1, b2 = json.dumps(v1).encode(), json.dumps(v2).encode()
    want = reshape_judge_stress([b1, b2])
    with serve({"v1.json": b1, "v2.json": b2}) as url:
        ups = (Upstream(f"{url}/v1.json", hashlib.sha256(b1).hexdigest()),
               Upstream(f"{url}/v2.json", hashlib.sha256(b2).hexdigest()))
        src = Source("stress", "stress.json", hashlib.sha256(want).hexdigest(), ups, "x", "y",
                     derive=reshape_judge_stress)
        monkeypatch.setitem(sources.SOURCES, "stress", src)
        monkeypatch.delenv("MNEMIS_DATA_MIRROR", raising=False)
        path = fetch("stress", _dirs(tmp_path), out=lambda s: None)
        assert json.loads(path.read_bytes()) == [{"question_id": "q0", "question": "Q?", "golden_answer": "A",
                                                  "category": 2, "wrong_specific": "B", "wrong_vague": "maybe"}]
        monkeypatch.setitem(sources.SOURCES, "stress", Source(**{**src.__dict__, "upstreams": (
            Upstream(f"{url}/v1.json", "0" * 64), ups[1])}))
        path.unlink()
        with pytest.raises(DataError, match=r"v1\.json: sha256 mismatch"):
            fetch("stress", _dirs(tmp_path), out=lambda s: None)
    assert _left(tmp_path) == []


def test_unpinned_file_records_its_hash_on_first_fetch(tmp_path, monkeypatch):
    monkeypatch.setitem(sources.SOURCES, "lme", Source("lme", "lme.json", None, (), "MIT", "z"))
    lines: list[str] = []
    with serve({"lme.json": BODY}) as url:
        path = fetch("lme", _dirs(tmp_path), mirror=url, out=lines.append)
    assert (tmp_path / "home" / "lme.json.sha256").read_text().split()[0] == SHA
    assert any("no pinned sha256" in line for line in lines)
    path.write_bytes(b"[]")  # later corruption is caught against the recorded hash
    assert not sources.verify(sources.SOURCES["lme"], path)[0]


def test_locate_prefers_a_present_file_then_fetches_on_first_use(tmp_path, fake_source, monkeypatch):
    extra = tmp_path / "extra"
    extra.mkdir()
    (extra / "fake.json").write_bytes(BODY)
    dirs = DataDirs(tmp_path / "home", (tmp_path / "home", extra))
    assert locate("fake", dirs) == extra / "fake.json"
    dirs = _dirs(tmp_path)
    with serve({"fake.json": BODY}) as url:
        monkeypatch.setenv("MNEMIS_DATA_MIRROR", url)
        assert locate("fake", dirs) == tmp_path / "home" / "fake.json"
    monkeypatch.setenv("MNEMIS_DATA_MIRROR", closed_port_url())
    with pytest.raises(DataError, match=r"mnemis data fetch other"):
        monkeypatch.setitem(sources.SOURCES, "other", Source("other", "other.json", SHA, (), "x", "y"))
        locate("other", dirs)


def test_data_dirs_follow_env_and_config(tmp_path, monkeypatch):
    monkeypatch.setenv("MNEMIS_DATA_DIR", str(tmp_path / "env"))
    assert DataDirs.from_config().home == tmp_path / "env"
    dirs = DataDirs.from_paths(PathsSettings(data_dir=str(tmp_path / "cfg"), shared_data_dir=str(tmp_path / "x"),
                                             artifacts_dir="a", cache_dir="c"))
    assert dirs.home == tmp_path / "cfg" and dirs.search[:2] == (tmp_path / "cfg", tmp_path / "x")
    assert dirs.search[-1] == sources.REPO_SHARED_DATA  # found from the package, not the cwd


@pytest.mark.skipif(not SHARED.is_dir(), reason="needs ../shared/data")
def test_pinned_hashes_match_the_reference_copies():
    for key in ("locomo", "locomo_audit", "judge_stress"):
        src = sources.SOURCES[key]
        assert sources.file_sha256(SHARED / src.filename) == src.sha256, key
    # the stored audit file is the upstream JSON re-indented: the derive rule reproduces it byte for byte
    audit = (SHARED / "locomo_audit_errors.json").read_bytes()
    assert sources.SOURCES["locomo_audit"].derive([json.dumps(json.loads(audit), indent=2).encode()]) == audit


@pytest.mark.skipif(not SHARED.is_dir(), reason="needs ../shared/data")
def test_fresh_clone_fetches_all_then_loads_locomo(tmp_path):
    """A clone with no ../shared beside it: `mnemis data fetch all` from a 127.0.0.1 mirror, then a LoCoMo load."""
    clone = tmp_path / "clone" / "mnemis"
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(REPO), str(clone)], check=True, timeout=60)
    assert not (clone.parent / "shared").exists()
    lme = [{"question_id": "q1", "question_type": "single-session-user", "question": "Q?", "answer": "A",
            "question_date": "2023/05/20 (Sat) 02:21", "haystack_session_ids": ["s1"],
            "haystack_dates": ["2023/05/20 (Sat) 01:00"], "haystack_sessions": [[
                {"role": "user", "content": "hi", "has_answer": True}]], "answer_session_ids": ["s1"]}]
    files = {name: (SHARED / name).read_bytes() for name in
             ("locomo10.json", "locomo_audit_errors.json", "locomo_judge_stress.json")}
    files["longmemeval_s_cleaned.json"] = json.dumps(lme).encode()
    files["locomo_plus.json"] = (SHARED / "locomo_plus.json").read_bytes()
    beam = {f"beam/100K/{p.parent.name}/{p.name}": p.read_bytes() for p in (SHARED / "beam" / "100K").glob("*/*.json")}
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(PYTHONPATH=str(clone), HOME=str(tmp_path / "home"), MNEMIS_DATA_DIR=str(tmp_path / "data"))
    with serve({**files, **beam}) as url:
        env["MNEMIS_DATA_MIRROR"] = url + "/redirect"
        res = subprocess.run([sys.executable, "-m", "mnemis.app.cli", "data", "fetch", "all"], cwd=tmp_path,
                             env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.count("CC BY-NC 4.0") == 1 and "MIT" in res.stdout  # each licence printed once
    assert sorted(p.name for p in (tmp_path / "data").iterdir()) == sorted(
        [*files, "longmemeval_s_cleaned.json.sha256", "beam"])
    assert len(list((tmp_path / "data" / "beam" / "100K").glob("*/*.json"))) == 40 and "CC BY-SA 4.0" in res.stdout
    code = ("from mnemis.data.locomo import load_locomo; import mnemis; d = load_locomo(); "
            "print(mnemis.__file__, len(d.groups), len(d.questions), d.warnings.get('checksum_mismatch', 0))")
    env.pop("MNEMIS_DATA_MIRROR")
    res = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr
    where, groups, questions, mismatch = res.stdout.split()
    assert where.startswith(str(clone)) and (groups, questions, mismatch) == ("10", "1986", "0")
