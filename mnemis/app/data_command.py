"""``mnemis data fetch|list``: fetch the benchmark files into the data dir, or list what is there and whether each
file's checksum holds (the files and their pins live in :mod:`mnemis.data.sources` and :mod:`mnemis.data.beam_files`)."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from mnemis.data import beam_files
from mnemis.data.errors import DataError
from mnemis.data.sources import NOT_IN_ALL, SOURCES, DataDirs, fetch, verify


def data_command(args: Sequence[str]) -> int:
    """``mnemis data fetch [names...|all] [--force]`` and ``mnemis data list``."""
    usage = ("usage: mnemis data fetch [locomo|locomo_audit|judge_stress|longmemeval_s|locomo_plus|beam|all ...] "
             "[--force]\n"
             "       mnemis data fetch longmemeval_m|beam_500K|beam_1M|beam_10M   (large: only by name)\n"
             "       mnemis data list\n"
             "Files go to $MNEMIS_DATA_DIR (default ~/.cache/mnemis/data); MNEMIS_DATA_MIRROR=<url or folder> "
             "fetches from a mirror.\n")
    if not args or args[0] in ("-h", "--help") or args[0] not in ("fetch", "list"):
        sys.stderr.write(usage)
        return 0 if args and args[0] in ("-h", "--help") else 2
    dirs = DataDirs.from_config()
    if args[0] == "list":
        for key, src in SOURCES.items():
            found = dirs.find(src.filename)
            state = "missing" if found is None else ("ok  " if verify(src, found)[0] else "BAD ") + str(found)
            print(f"{key:14s} {src.filename:28s} {state}")
        for key in beam_files.data_keys():
            scale = beam_files.scale_key(key)
            found = beam_files.find_scale(scale, dirs)
            state = "missing" if found is None else (
                ("ok  " if beam_files.verify_scale(scale, found)[0] else "BAD ") + str(found))
            print(f"{key:14s} {'beam/' + scale + '/':28s} {state}")
        return 0
    names = [a for a in args[1:] if not a.startswith("-")] or ["all"]
    force = "--force" in args
    failed, licences = 0, {}
    every = [k for k in SOURCES if k not in NOT_IN_ALL] + ["beam"]
    for key in every if "all" in names else names:
        scale = beam_files.scale_key(key)
        if scale is not None:
            failed += beam_files.fetch_command(key, scale, dirs, force, licences)
            continue
        try:
            found = None if force or key not in SOURCES else dirs.find(SOURCES[key].filename)
            if found is not None:
                ok, msg = verify(SOURCES[key], found)
                print(f"{key}: present at {found} ({msg if ok else 'BAD: ' + msg})")
                failed += not ok
                continue
            fetch(key, dirs, force=force, licence=False)
            licences.setdefault(SOURCES[key].licence, []).append(SOURCES[key].credit)
        except DataError as exc:
            failed += 1
            print(f"{key}: FAILED: {exc}", file=sys.stderr)
    for licence, credits in licences.items():
        print(f"licence {licence}:\n" + "".join(f"  - {c}\n" for c in credits), end="")
    return 1 if failed else 0

