"""A sharded job's state dir on node-local disk, and the refusal of SQLite on a network file system."""

from __future__ import annotations

from pathlib import Path

import pytest

from mnemis.scale.node_state import (
    NetworkFileSystemError,
    check_local,
    local_root,
    mount_of,
    parse_mounts,
    shard_paths,
    shard_state,
)
from mnemis.settings import PathsSettings, ScaleSettings, load_settings

MOUNTS = """\
/dev/vda1 / ext4 rw,relatime 0 0
tmpfs /scratch tmpfs rw 0 0
nas:/export/users /users nfs4 rw,vers=4.2 0 0
10.0.0.1@tcp:/lustre /lustre lustre rw,flock 0 0
gpfs0 /gpfs gpfs rw 0 0
sshfs#me@host: /mnt/remote fuse.sshfs rw 0 0
/dev/nvme0n1 /users/me/local\\040disk xfs rw 0 0
"""


def test_mount_table_and_longest_prefix(tmp_path):
    mounts = parse_mounts(MOUNTS)
    assert mounts[-1].point == Path("/users/me/local disk")  # octal escape decoded
    assert mount_of("/users/me/runs/x.sqlite", mounts).fstype == "nfs4"
    assert mount_of("/users/me/local disk/cache", mounts).fstype == "xfs"  # a local disk mounted under the NFS home
    assert mount_of("/scratch/a/b", mounts).fstype == "tmpfs"
    assert mount_of("/userspace", mounts).fstype == "ext4"  # a prefix of the string, not of the path


@pytest.mark.parametrize("path,fstype", [("/users/me/.cache/mnemis", "nfs4"), ("/lustre/proj/runs", "lustre"),
                                         ("/gpfs/scratch/a", "gpfs"), ("/mnt/remote/cache", "fuse.sshfs")])
def test_sqlite_on_a_network_file_system_is_refused_naming_path_and_reason(path, fstype):
    with pytest.raises(NetworkFileSystemError) as err:
        check_local({"paths.cache_dir (caches)": path}, parse_mounts(MOUNTS))
    msg = str(err.value)
    assert f"paths.cache_dir (caches) {path} is on a network file system ({fstype}" in msg
    assert "write-ahead log" in msg and "scale.local_dir=" in msg


def test_local_disks_pass():
    check_local({"a": "/scratch/x", "b": "/users/me/local disk/y", "c": "/var/runs", "d": None}, parse_mounts(MOUNTS))
    check_local({"here": "."}, None)  # this machine's own table: the checkout is on local disk


def test_state_folders_per_shard_and_run_dir(tmp_path):
    paths = PathsSettings(cache_dir=str(tmp_path / "c"), artifacts_dir="runs/artifacts", data_dir=None,
                          shared_data_dir=None)
    scale = ScaleSettings(local_dir=None)
    env = {"TMPDIR": str(tmp_path / "job-tmp")}
    a = shard_state("2/8", scale, paths, tmp_path / "sweep" / "shard_2", env)
    root = tmp_path / "job-tmp" / "mnemis-shards"
    assert (a.artifacts, a.cache) == (root / "artifacts", root / "cache" / "shard-2-of-8")
    assert a.progress.parent == root / "progress" and a.progress.name.startswith("shard-2-of-8-")
    assert shard_state("2/8", scale, paths, tmp_path / "sweep" / "shard_2", env) == a  # a retried job finds its state
    other = shard_state("2/8", scale, paths, tmp_path / "other" / "shard_2", env)  # another job of the shard (e.g. k)
    assert other.progress != a.progress and (other.artifacts, other.cache) == (a.artifacts, a.cache)
    assert shard_state(None, scale, paths, tmp_path, env) is None
    scratch = ScaleSettings(local_dir="/scratch")
    assert local_root(scratch, paths, {"SLURM_TMPDIR": "/s", "TMPDIR": "/t"}) == Path("/scratch")
    assert local_root(scale, paths, {"SLURM_TMPDIR": "/s", "TMPDIR": "/t"}) == Path("/s")
    assert local_root(scale, paths, {}) == tmp_path / "c"
    assert shard_paths(scale, a) == {"paths.artifacts_dir": str(a.artifacts), "paths.cache_dir": str(a.cache)}
    assert shard_paths(ScaleSettings(share_cache=True), a) == {"paths.artifacts_dir": str(a.artifacts)}


def test_the_main_job_refuses_a_network_cache_dir(tmp_path, monkeypatch):
    from mnemis.app.jobs import run_command
    from mnemis.config import compose
    from mnemis.scale import node_state

    table = parse_mounts(MOUNTS + f"server:/share {tmp_path / 'nfs'} nfs rw 0 0\n")
    monkeypatch.setattr(node_state, "read_mounts", lambda path=node_state.MOUNTS: table)
    cfg = compose(["experiment=quickstart", "llm=schema_fake", "embedder=hashing", "reranker=cosine",
                   f"paths.cache_dir={tmp_path / 'nfs' / 'cache'}", f"paths.artifacts_dir={tmp_path / 'art'}"])
    with pytest.raises(SystemExit, match=r"mnemis run: paths.cache_dir .* is on a network file system \(nfs"):
        run_command(cfg, tmp_path / "out")
    assert not (tmp_path / "out" / "config.json").exists()  # stopped before anything was written


def test_a_sharded_job_points_its_sqlite_files_at_its_state_dir(tmp_path, monkeypatch):
    """The composed config's ``${paths.cache_dir}`` interpolations (the LLM's cache dir) follow the state dir."""
    from mnemis.config import compose, to_plain, with_values

    cfg = compose(["experiment=lme_s_sharded", "shard=1/4", "llm=schema_fake", f"scale.local_dir={tmp_path}"])
    settings = load_settings(to_plain(cfg))
    state = shard_state(settings.shard, settings.scale, settings.paths, tmp_path / "run")
    got = to_plain(with_values(cfg, shard_paths(settings.scale, state)))
    assert got["llm"]["cache_dir"] == str(tmp_path / "mnemis-shards" / "cache" / "shard-1-of-4" / "llm")
    assert got["paths"]["artifacts_dir"] == str(tmp_path / "mnemis-shards" / "artifacts")


def test_shards_in_one_worker_share_the_engine_not_the_caches(tmp_path):
    """A worker running shard 0 then shard 1 keeps one engine (backend) and reranker model, each shard its caches."""
    from mnemis.components import Models
    from mnemis.config import compose, to_plain

    got = []
    for k in (0, 1):
        cache = tmp_path / f"shard{k}"
        plain = to_plain(compose(["llm=scripted_scale", "embedder=hashing", "reranker=cosine",
                                  f"paths.cache_dir={cache}", f"llm.backend.model_id=share-test-{tmp_path.name}"]))
        models = Models(load_settings(plain).models())
        got.append((models.llm, models.reranker))
        assert models.llm.cache.dir == cache / "llm" and models.reranker._db.path == cache / "rerank" / "rerank.sqlite"
    (llm0, rr0), (llm1, rr1) = got
    assert llm0 is not llm1 and llm0.backend is llm1.backend
    assert rr0 is not rr1 and rr0.inner is rr1.inner
