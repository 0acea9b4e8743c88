"""Where a shard keeps its state: node-local disk, never SQLite on a network file system.

A sharded job (``shard=i/N``) writes its SQLite files and progress under ``<root>/mnemis-shards/``, where
``root`` is ``scale.local_dir``, else ``$SLURM_TMPDIR``, else ``$TMPDIR``, else ``paths.cache_dir`` (one host):

- ``artifacts/<build hash>-shard-i-of-N/``: the shard's memory store (addressed by its build config, so a job
  of the same shard with other retrieval settings, or a later ``mnemis eval``, on this node reuses it);
- ``cache/shard-i-of-N/``: its LLM response and reranker caches (``scale.share_cache=true`` keeps the shared
  ``paths.cache_dir`` instead: one host only);
- ``progress/shard-i-of-N-<hash of the run dir>/``: its evaluation progress.

The run dir (on any file system) receives only plain files: the reports, ``shard.json`` and the shard's
response-cache archive (``mnemis.scale.merge`` unions those into one archive for replay). A retried or
requeued job has the same run dir, so it finds all of it again when it lands on the same node (a job that
lands elsewhere starts its shard again from nothing: correct, only slower).

``check_local(paths)`` refuses any SQLite location on a network file system (NFS, SMB/CIFS, Lustre, GPFS,
BeeGFS, CephFS, GlusterFS, FUSE mounts such as sshfs or gcsfuse): SQLite's write-ahead log needs every
process on one host, with memory shared through the ``-shm`` file, which such file systems do not provide.
The file system type comes from the mount table (``/proc/mounts``), the longest mount point above the path.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mnemis.data.shard import shard_tag
from mnemis.settings import PathsSettings, ScaleSettings

MOUNTS = Path("/proc/mounts")
NETWORK_FS = ("nfs", "nfs4", "cifs", "smb3", "smbfs", "lustre", "gpfs", "beegfs", "ceph", "glusterfs")
STATE_SUBDIR = "mnemis-shards"
REASON = ("SQLite's write-ahead log does not work on a network file system (every process using a database "
          "must be on one host, sharing its -shm file)")


class NetworkFileSystemError(RuntimeError):
    """A SQLite file (store, response cache, reranker cache) would live on a network file system."""


@dataclass(frozen=True)
class Mount:
    point: Path
    fstype: str


def parse_mounts(text: str) -> list[Mount]:
    """``/proc/mounts`` lines (device, mount point, type, ...) as mounts; octal escapes (``\\040``) decoded."""
    out = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 3:
            point = parts[1].encode().decode("unicode_escape")
            out.append(Mount(Path(point), parts[2]))
    return out


def read_mounts(path: Path = MOUNTS) -> list[Mount]:
    """The mount table of this machine (empty when there is none, e.g. not Linux)."""
    try:
        return parse_mounts(path.read_text(encoding="utf-8", errors="replace"))
    except OSError:
        return []


def mount_of(path: str | os.PathLike[str], mounts: list[Mount]) -> Mount | None:
    """The mount holding ``path`` (the longest mount point above it; the last such line wins, as in Linux)."""
    want = Path(os.path.abspath(Path(path).expanduser()))
    base = want
    while not base.exists() and base != base.parent:  # not created yet: links resolved up to what exists
        base = base.parent
    p = base.resolve() / want.relative_to(base)
    best: Mount | None = None
    for m in mounts:
        if p == m.point or m.point in p.parents:
            if best is None or len(m.point.parts) >= len(best.point.parts):
                best = m
    return best


def is_network_fs(fstype: str) -> bool:
    return fstype in NETWORK_FS or fstype.startswith("fuse.") or fstype == "fuse"


def check_local(paths: Mapping[str, Any], mounts: list[Mount] | None = None) -> None:
    """Raise ``NetworkFileSystemError`` naming the first ``{label: path}`` on a network file system."""
    table = read_mounts() if mounts is None else mounts
    for label, path in paths.items():
        if not path:
            continue
        m = mount_of(path, table)
        if m is not None and is_network_fs(m.fstype):
            raise NetworkFileSystemError(
                f"{label} {path} is on a network file system ({m.fstype} mounted at {m.point}): {REASON}. "
                "Put it on the node's local disk: scale.local_dir=/local/scratch/$USER (a sharded job puts its "
                "store and caches there), or paths.cache_dir=... paths.artifacts_dir=... on local disk; "
                "scale.check_fs=false skips this check")


def local_root(scale: ScaleSettings, paths: PathsSettings, environ: Mapping[str, str] | None = None) -> Path:
    """Root of the shards' state dirs: ``scale.local_dir``, ``$SLURM_TMPDIR``, ``$TMPDIR``, else the cache dir."""
    env = os.environ if environ is None else environ
    for candidate in (scale.local_dir, env.get("SLURM_TMPDIR"), env.get("TMPDIR")):
        if candidate:
            return Path(str(candidate)).expanduser()
    return Path(str(paths.cache_dir))


@dataclass(frozen=True)
class ShardState:
    """A sharded job's node-local folders (see the module docstring)."""

    root: Path
    tag: str  # shard-i-of-N
    run_key: str  # hash of the job's run dir

    @property
    def artifacts(self) -> Path:
        return self.root / "artifacts"

    @property
    def cache(self) -> Path:
        return self.root / "cache" / self.tag

    @property
    def progress(self) -> Path:
        return self.root / "progress" / f"{self.tag}-{self.run_key}"


def shard_state(shard: str | None, scale: ScaleSettings, paths: PathsSettings, run_dir: str | os.PathLike[str],
                environ: Mapping[str, str] | None = None) -> ShardState | None:
    """The state folders of a sharded job (same run dir -> same folders); None when the job is not sharded."""
    tag = shard_tag(shard)
    if not tag:
        return None
    digest = hashlib.sha256(str(Path(run_dir).resolve()).encode()).hexdigest()[:10]
    return ShardState(local_root(scale, paths, environ) / STATE_SUBDIR, tag, digest)


def shard_paths(scale: ScaleSettings, state: ShardState) -> dict[str, str]:
    """The config values that put a sharded job's SQLite files into its state folders: ``paths.artifacts_dir``
    and (unless ``scale.share_cache``) ``paths.cache_dir``, which every ``${paths.cache_dir}`` follows."""
    values = {"paths.artifacts_dir": str(state.artifacts)}
    if not scale.share_cache:
        values["paths.cache_dir"] = str(state.cache)
    return values


def sqlite_paths(paths: PathsSettings) -> dict[str, str]:
    """The folders a job opens SQLite files in: the stores and every cache."""
    return {"paths.artifacts_dir (the memory store)": paths.artifacts_dir,
            "paths.cache_dir (response and reranker caches)": paths.cache_dir}
