"""Triton kernels, importable as ``mnemis.kernels`` (never ``import kernels``: that name is a Hugging Face
package). Each kernel has a pure-torch reference in :mod:`mnemis.ops`, which also dispatches between them.
Importing this package leaves triton unloaded; the kernel module loads it on use."""
