"""BEAM's files: the pinned upstream commit, sha256 checks, the data dirs, ``mnemis data fetch beam[_<scale>]``.

A scale is stored as ``beam/<scale>/<n>/chat.json`` and ``beam/<scale>/<n>/probing_questions.json`` in a data
dir (the layout of ``../shared/data/beam``; upstream keeps the questions one folder deeper). The 100K sums
are pinned here (the same as ``beam/SHA256SUMS`` of the shared copy); the other scales' sums are recorded in
``beam/<scale>/SHA256SUMS`` on their first fetch and checked from then on, as the LongMemEval-S file's is.
Files are streamed to disk (the 10M chats are large) and renamed only once verified.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path

from mnemis.data.errors import DataError
from mnemis.data.sources import DataDirs, file_sha256, stream_to

log = logging.getLogger(__name__)

BEAM_REPO = "mohammadtavakoli78/BEAM"
BEAM_COMMIT = "b2a3ee8ba12d68f83143dda191097dc3e028ddd3"
COUNTS = {"100K": 20, "500K": 35, "1M": 35, "10M": 10}
# stored name -> path under chats/<scale>/<n>/ upstream
FILES = {"chat.json": "chat.json", "probing_questions.json": "probing_questions/probing_questions.json"}
LICENCE = "CC BY-SA 4.0 (as stated on the dataset page)"
CREDIT = ("BEAM: Tavakoli et al., Beyond a Million Tokens: Benchmarking and Enhancing Long-Term Memory in LLMs, "
          "ICLR 2026 (github.com/mohammadtavakoli78/BEAM)")
SUMS_FILE = "SHA256SUMS"
PINNED_100K_SUMS = """
ea71efd5dcc13f7366d3737b45d532eadb3d1497f3d6f23d1fa1c4004d5ffdf2  100K/1/chat.json
047398ff1497674b11585e7b4829c3d64d2d5e63f7f3572c826b73ca1faaf898  100K/1/probing_questions.json
3a3bd796f4aa24e8f34e718dc2823ae942663349eb89054f03885051e2daf1c4  100K/2/chat.json
d188e929644c9ef9fcd4520e7b5a3daf2c2e069b1247a324bd13d5aadd1ed96e  100K/2/probing_questions.json
432d3ae5493c04a17a5b6b0ef7c012a70e70ac5cfcaef13059fca6bedb903009  100K/3/chat.json
f53030f3753b0e0a93b330bc62d597cb66375c0c794094d7e69b7646df46e324  100K/3/probing_questions.json
e0ef0f74b1f7ac911e8e0518722335c422cbc1112048e9909911b208c51fc027  100K/4/chat.json
f69eda522cd7325830c8f78b6f02a571c992b6cf43311fa96f28043fd3c18dae  100K/4/probing_questions.json
13ac88e483e0d63d3830479fe17f961af1b414503b5077914865eca1c48a1ce8  100K/5/chat.json
bdd0819a911e46951dbf998905b8eba96a0cdb103cd3dda79ae9c6831e5f195d  100K/5/probing_questions.json
5365cdc41da212fb7143cf9f191ff7862eed8e9ca175b3728fe593adedc87871  100K/6/chat.json
7a6f88dfdeb3f1b582209a745e7c980158dbb2829a9ceae6cdb08bb868a00035  100K/6/probing_questions.json
525271b1d24179dbc2deb664c69db0bbaead5938630a0b0d5cd2881b8b79224d  100K/7/chat.json
2c00219e839d54c7cd3e4fbb396f8a2517fd9f143d3a3b8ea1c4fb9f5c4435c7  100K/7/probing_questions.json
3207b8f5aa45cd1b2d1e2f37f224831b4696d0cc2352ef514af08f2092b6c239  100K/8/chat.json
d279dbd8fd293692d29f0057b3dd2468ccb97c7da6df28ae2adc8481d9970148  100K/8/probing_questions.json
446777f3eed114c27d62030ad86cfb8ad6610fda0fc83dfe98403b8d68b74bd4  100K/9/chat.json
b7ab1c7022c0b7ac6928f4c2efadd08e2a438dc91e1288209df066cdcd5e9573  100K/9/probing_questions.json
de18b7b0ad73491f338296b64ae30f16b94d77404420d971d3f6b513d190ad1c  100K/10/chat.json
e9bf9bb545b350425a770ef65b501434ba9983c7535b4524dd6ae4d5743b5a95  100K/10/probing_questions.json
45cb4fab51042278e6a57f524fca4cd4b8941cbbd091f9ec8fb92dad4de31b12  100K/11/chat.json
3aa98a74a03be59472834422dd14004d3b432a0c800bbef8f316865834449c08  100K/11/probing_questions.json
2654160ebfcbd8a9f7d47a0340503cb301b0f54cb472f93578fa20e78c84c430  100K/12/chat.json
c36c9b1d4df0d063d1c7db81b35b5ea4743e38a804382d6e557f37ec46e1d6e3  100K/12/probing_questions.json
aea586c143dab53cb5a021b3fab23380d5d9628fea1c4b718f91411019166dc6  100K/13/chat.json
02dee0ba1d5576aed8ac535328a23fe4f882f6dcff3b96e039162e10d547236b  100K/13/probing_questions.json
43fbffd9ca235a980203faf4c5d6f636e97af4f31f6d91d9cbe42035ab4f0b0d  100K/14/chat.json
f30350303b4ccd52a36deaf57750a2bf6924fa5885da92d8230797a82dcfbe5f  100K/14/probing_questions.json
e758dfbdfe6d5a6bd060c6577e6f0282eb445fd7f93150208dcd56e8f8676f43  100K/15/chat.json
6d6ed59bd8cad87ce279c08f42137c2199502d09f198cfa880ef3ab04debd891  100K/15/probing_questions.json
414f11e16156d490cfb8449db62bddae88308e5b37fa79df54b147637f059afd  100K/16/chat.json
abf20d16a37322112af0fe48f5c43be0d824d54ae2bb2c5e3e069c6e84c54033  100K/16/probing_questions.json
6eb309c34fd98025327bbe46dec8cdfbf76304c249d3f579f02f46cea06eeefe  100K/17/chat.json
7948981c2e40751bfe9ace82e53497d32229245e6012a2e5d4da2e801c929451  100K/17/probing_questions.json
3c08576a5726fa48b9f906bc8699fab37e33cc5219f076f76374f7c1302449cb  100K/18/chat.json
d813db9e2b416e6ac7cc22841b131ea5c80e5931e690f81bb37aa16c3b9edc3a  100K/18/probing_questions.json
4c6dd78fa5aa6bd645eab8a3f041eac290c87564fd822582477c8e446979850f  100K/19/chat.json
b911651b2b18e835aaac58b2bc3cb018bc782e252b9161dca8174961ca498ce2  100K/19/probing_questions.json
af49a279c8ca5eef5829f8155bca89b41b05fb33fef438dce0a6cac8d99a7802  100K/20/chat.json
46b679bffff904fd71ed247f5172e9a4a30ed7eb2fdaacc1d89aac0932e5f043  100K/20/probing_questions.json
"""


def parse_sums(text: str) -> dict[str, str]:
    """``{relative path: sha256}`` from ``sha256sum`` output lines."""
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2:
            out[parts[1].lstrip("*")] = parts[0]
    return out


PINNED = {"100K": {k.split("/", 1)[1]: v for k, v in parse_sums(PINNED_100K_SUMS).items()}}


def scale_key(key: str) -> str | None:
    """The scale of a data key: ``beam`` -> 100K, ``beam_1M`` -> 1M; None for other keys."""
    if key == "beam":
        return "100K"
    if key.startswith("beam_") and key[5:] in COUNTS:
        return key[5:]
    return None


def data_keys() -> list[str]:
    return ["beam"] + [f"beam_{s}" for s in COUNTS if s != "100K"]


def relpaths(scale: str) -> list[str]:
    return [f"{n}/{name}" for n in range(1, COUNTS[scale] + 1) for name in FILES]


def expected_sums(scale: str, folder: Path) -> dict[str, str]:
    """The pinned sums of ``scale`` or those recorded beside its files (empty when neither exists)."""
    if scale in PINNED:
        return PINNED[scale]
    rec = folder / SUMS_FILE
    return parse_sums(rec.read_text()) if rec.is_file() else {}


def verify_scale(scale: str, folder: Path, *, only: list[str] | None = None) -> tuple[bool, str]:
    """(ok, message) for a scale folder: every file present and matching its pinned or recorded sum."""
    want = expected_sums(scale, folder)
    bad, missing = [], []
    for rel in only or relpaths(scale):
        p = folder / rel
        if not p.is_file():
            missing.append(rel)
        elif rel in want and file_sha256(p) != want[rel]:
            bad.append(rel)
    if missing:
        return False, f"{folder}: {len(missing)} files missing (e.g. {missing[0]})"
    if bad:
        return False, f"{folder}: sha256 mismatch for {', '.join(bad[:3])}{' …' if len(bad) > 3 else ''}"
    return True, "sha256 ok" if want else "no pinned sums (not recorded yet)"


def find_scale(scale: str, dirs: DataDirs) -> Path | None:
    """The first data dir holding ``beam/<scale>`` with every conversation's two files."""
    for d in dirs.search:
        folder = d / "beam" / scale
        if folder.is_dir() and all((folder / rel).is_file() for rel in relpaths(scale)):
            return folder
    return None


def _source(scale: str, n: int, name: str, mirror: str | None) -> str:
    if mirror:
        base = mirror.removeprefix("file://")
        if "://" in mirror and not mirror.startswith("file://"):
            return f"{mirror.rstrip('/')}/beam/{scale}/{n}/{name}"
        return str(Path(base).expanduser() / "beam" / scale / str(n) / name)
    return f"https://raw.githubusercontent.com/{BEAM_REPO}/{BEAM_COMMIT}/chats/{scale}/{n}/{FILES[name]}"


def fetch_scale(scale: str, dirs: DataDirs, *, mirror: str | None = None, force: bool = False,
                out: Callable[[str], None] = print) -> Path:
    """Fetch every file of ``scale`` into ``dirs.home/beam/<scale>`` (files already there and verified are
    kept); record the sums of a scale without pinned ones. Returns the folder."""
    if scale not in COUNTS:
        raise DataError(f"beam_{scale}", f"unknown BEAM scale (known: {', '.join(COUNTS)})")
    mirror = mirror if mirror is not None else os.environ.get("MNEMIS_DATA_MIRROR") or None
    folder = dirs.home / "beam" / scale
    want = expected_sums(scale, folder)
    got: dict[str, str] = dict(want)
    for n in range(1, COUNTS[scale] + 1):
        for name in FILES:
            rel = f"{n}/{name}"
            dest = folder / rel
            if dest.is_file() and not force:
                sha = file_sha256(dest)
                if rel in want and sha != want[rel]:
                    raise DataError(str(dest), f"sha256 mismatch (expected {want[rel]}, got {sha}); delete it or "
                                    "run with --force")
                got[rel] = sha
                continue
            url = _source(scale, n, name, mirror)
            out(f"beam {scale}: fetching {url}")
            got[rel], _ = stream_to(url, dest, want.get(rel), out=lambda s: log.info("%s", s))
            if scale not in PINNED:  # recorded as it goes, so an interrupted fetch resumes verified
                _write_sums(folder, got)
    if scale not in PINNED and got != want:
        _write_sums(folder, got)
        out(f"beam {scale}: no pinned sums; recorded {len(got)} in {folder / SUMS_FILE} (checked from now on)")
    out(f"beam {scale}: {folder} ({COUNTS[scale]} conversations)")
    return folder


def _write_sums(folder: Path, sums: dict[str, str]) -> None:
    text = "".join(f"{sha}  {rel}\n" for rel, sha in sorted(sums.items(), key=lambda kv: _order(kv[0])))
    tmp = folder / f".{SUMS_FILE}.part"
    tmp.write_text(text)
    os.replace(tmp, folder / SUMS_FILE)


def _order(rel: str) -> tuple[int, str]:
    head, _, tail = rel.partition("/")
    return (int(head) if head.isdigit() else 1 << 30, tail)


def locate_scale(scale: str, dirs: DataDirs | None = None, *, fetch_missing: bool = True) -> Path:
    """The folder of ``scale``: found in the data dirs, else fetched (``fetch_missing``)."""
    dirs = dirs or DataDirs.from_config()
    found = find_scale(scale, dirs)
    if found is not None:
        return found
    if not fetch_missing:
        raise DataError(f"beam/{scale}", f"not found in {', '.join(map(str, dirs.search))} (mnemis data fetch "
                        f"{'beam' if scale == '100K' else 'beam_' + scale})")
    try:
        return fetch_scale(scale, dirs, out=lambda s: log.info("%s", s))
    except DataError as exc:
        raise DataError(f"beam/{scale}", f"not found in {', '.join(map(str, dirs.search))} and the fetch failed "
                        f"({exc}). Run `mnemis data fetch beam{'' if scale == '100K' else '_' + scale}` on a "
                        "machine with network access, set MNEMIS_DATA_MIRROR, or set dataset.path") from None


def fetch_command(key: str, scale: str, dirs: DataDirs, force: bool, licences: dict) -> int:
    """``mnemis data fetch beam[_<scale>]``: 1 when it failed (the error printed), else 0."""
    try:
        found = None if force else find_scale(scale, dirs)
        if found is not None:
            ok, msg = verify_scale(scale, found)
            print(f"{key}: present at {found} ({msg if ok else 'BAD: ' + msg})")
            return int(not ok)
        fetch_scale(scale, dirs, force=force)
        licences.setdefault(LICENCE, []).append(CREDIT)
        return 0
    except DataError as exc:
        print(f"{key}: FAILED: {exc}", file=sys.stderr)
        return 1
