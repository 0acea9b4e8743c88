"""Where the benchmark files come from: pinned upstream URLs, sha256 checks, the data dirs, ``mnemis data fetch``.

Every file has one entry in ``SOURCES``: the file name, the sha256 of the file as stored, its upstream
file(s) at a pinned commit (each with its own sha256) and, for the two LoCoMo side files, the rule that
turns the upstream bytes into the stored file (a re-indent, a reshape). Files are looked up in

1. the user data dir: ``paths.data_dir``, else ``$MNEMIS_DATA_DIR``, else ``~/.cache/mnemis/data``;
2. ``../shared/data`` beside the repository checkout (resolved from this package, not the cwd) and any
   extra folder given (``paths.shared_data_dir``), when they exist;

and fetched into the user data dir when absent. ``$MNEMIS_DATA_MIRROR`` (a URL or a folder) replaces the
upstreams: the stored file names are fetched from it and checked against the same sha256. Writes are
atomic (a temp file beside the target, verified, then renamed), so a failed or corrupt download never
leaves a file behind under the final name.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import logging
import os
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from mnemis.data.errors import DataError
from mnemis.settings import PathsSettings

log = logging.getLogger(__name__)

REPO_SHARED_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
DEFAULT_DATA_DIR = Path("~/.cache/mnemis/data")
LOCOMO_COMMIT = "3eb6f2c585f5e1699204e3c3bdf7adc5c28cb376"
AUDIT_COMMIT = "9493fb4b4af4256ed17a18e8fd0b3cfdeec29539"
# The cleaned LongMemEval release (Sept 2025). No commit hash or sha256 of this file was available when it
# was pinned: the branch is pinned and the sha256 is recorded on first fetch (``<file>.sha256`` beside it)
# and checked on every later use. Set MNEMIS_LME_REVISION to a commit to pin harder.
LME_REPO = "xiaowu0162/longmemeval-cleaned"
LME_REVISION = "main"
LOCOMO_PLUS_COMMIT = "059f4e3d38f7f1f96765e8e2cb7de3097551bffb"
LOCOMO_PLUS_SHA256 = "af2fc6e5e0e88735e28d8dd1ef474b718861a73beb21779809e3b9e1a4fe3d23"
CC_BY_NC = ("CC BY-NC 4.0 (Attribution-NonCommercial 4.0 International): credit the authors, "
            "non-commercial use only")
TIMEOUT_S = 60.0


def _canonical_json(blobs: Sequence[bytes]) -> bytes:
    """The stored form of a JSON file: one-space indent, UTF-8 kept, no trailing newline."""
    return json.dumps(json.loads(blobs[0]), indent=1, ensure_ascii=False).encode()


def reshape_judge_stress(blobs: Sequence[bytes]) -> bytes:
    """``locomo_judge_stress.json`` from the audit's adversarial-plausibility results v1 (specific wrong
    answers) and v2 (vague wrong answers): one row per question, in v1's order."""
    def rows(blob: bytes) -> list[dict]:
        return [r for group in json.loads(blob)["detailed_results"].values() for r in group]

    vague = {r["question_id"]: r["generated_answer"] for r in rows(blobs[1])}
    out = []
    for r in rows(blobs[0]):
        qid = r["question_id"]
        if qid not in vague:
            raise DataError("locomo_judge_stress.json", f"{qid} is in the v1 results but not in v2")
        out.append({"question_id": qid, "question": r["question"], "golden_answer": r["golden_answer"],
                    "category": int(r["category"]), "wrong_specific": r["generated_answer"],
                    "wrong_vague": vague[qid]})
    return json.dumps(out, indent=1, ensure_ascii=False).encode()


@dataclass(frozen=True)
class Upstream:
    url: str
    sha256: str | None


@dataclass(frozen=True)
class Source:
    """One stored file: ``sha256`` None means unknown here (recorded on first fetch, then checked)."""

    key: str
    filename: str
    sha256: str | None
    upstreams: tuple[Upstream, ...]
    licence: str
    credit: str
    derive: Callable[[Sequence[bytes]], bytes] | None = None
    huggingface: bool = False        # served by the HF hub: refused while HF_HUB_OFFLINE=1
    notes: tuple[str, ...] = field(default=())
    stream: bool = False             # too large to hold in memory: streamed to disk while hashed


def _raw(repo: str, commit: str, path: str) -> str:
    return f"https://raw.githubusercontent.com/{repo}/{commit}/{path}"


def _lme_upstream(filename: str = "longmemeval_s_cleaned.json") -> Upstream:
    rev = os.environ.get("MNEMIS_LME_REVISION", LME_REVISION)
    return Upstream(f"https://huggingface.co/datasets/{LME_REPO}/resolve/{rev}/{filename}", None)


SOURCES: dict[str, Source] = {
    "locomo": Source(
        "locomo", "locomo10.json", "79fa87e90f04081343b8c8debecb80a9a6842b76a7aa537dc9fdf651ea698ff4",
        (Upstream(_raw("snap-research/locomo", LOCOMO_COMMIT, "data/locomo10.json"),
                  "79fa87e90f04081343b8c8debecb80a9a6842b76a7aa537dc9fdf651ea698ff4"),),
        CC_BY_NC, "LoCoMo: Maharana et al., Evaluating Very Long-Term Conversational Memory of LLM Agents, "
        "ACL 2024 (github.com/snap-research/locomo)"),
    "locomo_audit": Source(
        "locomo_audit", "locomo_audit_errors.json",
        "72af63707d65ebdeea2ef38f9038f3d77c0004e036c8f9822a92a71e02c5eb31",
        (Upstream(_raw("dial481/locomo-audit", AUDIT_COMMIT, "errors.json"),
                  "f298ef46263fada20688a1d672be37d4f488c6da3b19343eea55ae5c1b5fe55e"),),
        CC_BY_NC, "LoCoMo audit: github.com/dial481/locomo-audit (errors.json)", derive=_canonical_json),
    "judge_stress": Source(
        "judge_stress", "locomo_judge_stress.json",
        "ecc17708de03920229ccf5830988ee0e05f98fe26cae200abbdae002411a8985",
        (Upstream(_raw("dial481/locomo-audit", AUDIT_COMMIT, "ap-baseline/v1/ap_eval_results.json"),
                  "080338f63c229d36b2a177cf4c0720a47aedff830f8202c908c40412d76f5feb"),
         Upstream(_raw("dial481/locomo-audit", AUDIT_COMMIT, "ap-baseline/v2/ap_eval_results.json"),
                  "3118fcc86f683d32e0b7294f65345ff8d612e74bd8d5da9af82627d12b82810a")),
        CC_BY_NC, "LoCoMo audit, adversarial-plausibility baseline v1 + v2 (github.com/dial481/locomo-audit)",
        derive=reshape_judge_stress),
    "longmemeval_s": Source(
        "longmemeval_s", "longmemeval_s_cleaned.json", None, (_lme_upstream(),),
        "MIT", "LongMemEval: Wu et al., ICLR 2025 (huggingface.co/datasets/xiaowu0162/longmemeval-cleaned)",
        huggingface=True),
    "locomo_plus": Source(
        "locomo_plus", "locomo_plus.json", LOCOMO_PLUS_SHA256,
        (Upstream(_raw("xjtuleeyf/Locomo-Plus", LOCOMO_PLUS_COMMIT, "data/locomo_plus.json"), LOCOMO_PLUS_SHA256),),
        CC_BY_NC, "LoCoMo-Plus: Beyond-Factual Cognitive Memory Evaluation, arXiv:2602.10715 "
        "(github.com/xjtuleeyf/Locomo-Plus); built on LoCoMo"),
    "longmemeval_m": Source(
        "longmemeval_m", "longmemeval_m_cleaned.json", None, (_lme_upstream("longmemeval_m_cleaned.json"),),
        "MIT", "LongMemEval: Wu et al., ICLR 2025 (huggingface.co/datasets/xiaowu0162/longmemeval-cleaned)",
        huggingface=True, stream=True),
}
FILES = {s.filename: s for s in SOURCES.values()}
# Fetched by name only (``mnemis data fetch longmemeval_m``), never by ``all``: 2.7 GB.
NOT_IN_ALL = frozenset({"longmemeval_m"})


@dataclass(frozen=True)
class DataDirs:
    """Where files are looked for (``search``, first hit wins) and where fetched files go (``home``)."""

    home: Path
    search: tuple[Path, ...]

    @classmethod
    def from_config(cls, data_dir: str | None = None, extra: Sequence[str | Path | None] = ()) -> DataDirs:
        home = Path(data_dir or os.environ.get("MNEMIS_DATA_DIR") or DEFAULT_DATA_DIR).expanduser()
        others = [Path(p).expanduser() for p in extra if p] + [REPO_SHARED_DATA]
        return cls(home, tuple(dict.fromkeys([home, *others])))

    @classmethod
    def from_paths(cls, paths: PathsSettings | None) -> DataDirs:
        """From the ``paths`` settings: ``data_dir`` (home) and ``shared_data_dir`` (an extra folder); None: the
        defaults of :meth:`from_config`."""
        if paths is None:
            return cls.from_config(None, [None])
        return cls.from_config(paths.data_dir, [paths.shared_data_dir])

    def find(self, filename: str) -> Path | None:
        for d in self.search:
            if (d / filename).is_file():
                return d / filename
        return None


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def expected_sha256(source: Source, path: Path) -> str | None:
    """The pinned sha256, else the one recorded beside the file on its first fetch, else None."""
    if source.sha256:
        return source.sha256
    rec = path.with_name(path.name + ".sha256")
    return rec.read_text().split()[0] if rec.is_file() else None


def verify(source: Source, path: Path) -> tuple[bool, str]:
    """(ok, message) for a local file against its pinned or recorded sha256."""
    want, got = expected_sha256(source, path), file_sha256(path)
    if want is None:
        return True, f"sha256 {got[:12]}… (no pinned hash; not recorded yet)"
    if want != got:
        return False, f"{path}: sha256 mismatch (expected {want}, got {got})"
    return True, f"sha256 ok ({got[:12]}…)"


def _check(data: bytes, want: str | None, what: str) -> None:
    got = hashlib.sha256(data).hexdigest()
    if want is not None and got != want:
        raise DataError(what, f"sha256 mismatch (expected {want}, got {got}); nothing was written")


def _read_url(url: str) -> bytes:
    """The body of ``url`` (redirects followed); a short body (Content-Length not reached) is an error."""
    if url.startswith("file://") or "://" not in url:
        return Path(url.removeprefix("file://")).expanduser().read_bytes()
    req = urllib.request.Request(url, headers={"User-Agent": "mnemis-data-fetch"})
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT_S) as resp:
            length = resp.headers.get("Content-Length")
            chunks, total, step = [], 0, 0
            for block in iter(lambda: resp.read(1 << 20), b""):
                chunks.append(block)
                total += len(block)
                if length and total * 10 // int(length) > step:
                    step = total * 10 // int(length)
                    log.info("%s: %d/%s bytes", url, total, length)
    except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError) as exc:
        raise DataError(url, f"download failed: {exc}") from None
    data = b"".join(chunks)
    if length is not None and len(data) != int(length):
        raise DataError(url, f"truncated download ({len(data)} of {length} bytes)")
    return data


def _atomic_write(dest: Path, data: bytes) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".part", dir=dest.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, dest)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _mirror_location(mirror: str, filename: str) -> str:
    if "://" in mirror and not mirror.startswith("file://"):
        return mirror.rstrip("/") + "/" + filename
    return str(Path(mirror.removeprefix("file://")).expanduser() / filename)


def fetch(key: str, dirs: DataDirs, *, mirror: str | None = None, force: bool = False,
          out: Callable[[str], None] = print, licence: bool = True) -> Path:
    """Download one file into ``dirs.home`` (from ``mirror`` or its pinned upstreams), verified; its path."""
    if key not in SOURCES:
        raise DataError(key, f"unknown data file (known: {', '.join(SOURCES)}, all)")
    src = SOURCES[key]
    if src.huggingface and src.upstreams[0].url.startswith(f"https://huggingface.co/datasets/{LME_REPO}/"):
        src = Source(**{**src.__dict__, "upstreams": (_lme_upstream(src.filename),)})  # MNEMIS_LME_REVISION
    dest = dirs.home / src.filename
    if dest.is_file() and not force:
        ok, msg = verify(src, dest)
        if not ok:
            raise DataError(str(dest), msg.split(": ", 1)[1] + "; delete it or run with --force")
        return dest
    mirror = mirror if mirror is not None else os.environ.get("MNEMIS_DATA_MIRROR") or None
    if src.stream:
        return _fetch_streamed(src, dest, mirror, out, licence)
    if mirror:
        loc = _mirror_location(mirror, src.filename)
        out(f"{key}: fetching {loc}")
        try:
            data = _read_url(loc)
        except OSError as exc:
            raise DataError(loc, f"mirror read failed: {exc}") from None
    else:
        if src.huggingface and os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false"):
            raise DataError(src.filename, "HF_HUB_OFFLINE is set; unset it (or set MNEMIS_DATA_MIRROR) to fetch")
        blobs = []
        for up in src.upstreams:
            out(f"{key}: fetching {up.url}")
            blob = _read_url(up.url)
            _check(blob, up.sha256, up.url)
            blobs.append(blob)
        data = src.derive(blobs) if src.derive else blobs[0]
    _check(data, src.sha256, f"{src.filename} (from {mirror or 'upstream'})")
    _atomic_write(dest, data)
    return _fetched(src, dest, hashlib.sha256(data).hexdigest(), len(data), out, licence)


def _fetched(src: Source, dest: Path, got: str, size: int, out: Callable[[str], None], licence: bool) -> Path:
    """Record the sha256 of a file without a pinned one (checked from then on) and say what was written."""
    if src.sha256 is None:
        _atomic_write(dest.with_name(dest.name + ".sha256"), f"{got}  {src.filename}\n".encode())
        out(f"{src.key}: no pinned sha256 for this file; recorded {got} in {dest.name}.sha256 (checked from now on)")
    out(f"{src.key}: {dest} ({size:,} bytes, sha256 {got[:12]}…)")
    if licence:
        out(f"  licence: {src.licence}. Source: {src.credit}.")
    return dest


def stream_to(url: str, dest: Path, want: str | None, *, out: Callable[[str], None] = print) -> tuple[str, int]:
    """Copy ``url`` (or a local path) to ``dest`` in 1 MiB blocks, hashing as it goes: memory stays flat for
    any size. Written to a temp file beside ``dest`` and renamed only when complete and matching ``want``
    (a short body or a sha256 mismatch leaves nothing behind). Returns ``(sha256, bytes)``."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".part", dir=dest.parent)
    h, total = hashlib.sha256(), 0
    try:
        with os.fdopen(fd, "wb") as f:
            if url.startswith("file://") or "://" not in url:
                src_f, length = open(Path(url.removeprefix("file://")).expanduser(), "rb"), None
            else:
                req = urllib.request.Request(url, headers={"User-Agent": "mnemis-data-fetch"})
                src_f = urllib.request.urlopen(req, timeout=TIMEOUT_S)
                length = src_f.headers.get("Content-Length")
            with src_f:
                step = 0
                for block in iter(lambda: src_f.read(1 << 20), b""):
                    f.write(block)
                    h.update(block)
                    total += len(block)
                    if length and total * 10 // int(length) > step:
                        step = total * 10 // int(length)
                        out(f"  {url}: {total:,}/{int(length):,} bytes")
        if length is not None and total != int(length):
            raise DataError(url, f"truncated download ({total} of {length} bytes); nothing was written")
        got = h.hexdigest()
        if want is not None and got != want:
            raise DataError(url, f"sha256 mismatch (expected {want}, got {got}); nothing was written")
        os.replace(tmp, dest)
        return got, total
    except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError) as exc:
        raise DataError(url, f"download failed: {exc}") from None
    finally:
        Path(tmp).unlink(missing_ok=True)


def _fetch_streamed(src: Source, dest: Path, mirror: str | None, out: Callable[[str], None],
                    licence: bool) -> Path:
    if mirror:
        url = _mirror_location(mirror, src.filename)
    else:
        if src.huggingface and os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false"):
            raise DataError(src.filename, "HF_HUB_OFFLINE is set; unset it (or set MNEMIS_DATA_MIRROR) to fetch")
        url = src.upstreams[0].url
    out(f"{src.key}: fetching {url} (streamed to disk)")
    got, size = stream_to(url, dest, src.sha256, out=out)
    return _fetched(src, dest, got, size, out, licence)


def locate(key: str, dirs: DataDirs | None = None, *, fetch_missing: bool = True,
           out: Callable[[str], None] | None = None) -> Path:
    """The local path of a data file: found in the data dirs, else fetched (``fetch_missing``)."""
    dirs = dirs or DataDirs.from_config()
    src = SOURCES[key]
    found = dirs.find(src.filename)
    if found is not None:
        return found
    if not fetch_missing:
        return dirs.home / src.filename
    log.info("%s not found in %s; fetching it (mnemis data fetch %s)", src.filename,
             ", ".join(map(str, dirs.search)), key)
    try:
        return fetch(key, dirs, out=out or (lambda s: log.info("%s", s)))
    except DataError as exc:
        raise DataError(src.filename, f"not found in {', '.join(map(str, dirs.search))} and the fetch failed "
                        f"({exc}). Run `mnemis data fetch {key}` on a machine with network access, set "
                        "MNEMIS_DATA_MIRROR=<url or folder>, or pass the file's path in the config") from None


def side_file(key: str, dirs: DataDirs | None = None) -> Path | None:
    """An evaluation side file (audit, judge stress): found or fetched; None (with a warning) when neither works."""
    try:
        return locate(key, dirs)
    except DataError as exc:
        log.warning("%s; the scores that need it are skipped", exc)
        return None
