"""Vector indexes over L2-normalised embeddings; score = inner product (= cosine).

Two backends share one batch API (``add``, ``search``, ``save``, ``load``):

- :class:`ExactIndex`: one torch matmul + ``topk`` on any device. The reference and the default for
  memory-sized collections (one LoCoMo conversation is ~600 episodes).
- :class:`FaissIndex`: FAISS flat (exact), IVF or HNSW (approximate) for large collections; flat and IVF
  go to the GPU when a faiss GPU build and a CUDA device are present. This is the only module that
  imports ``faiss``, always inside functions.

``search`` returns ``(scores [Q, k'], ids)`` with ``k' = min(k, N)``; ``ids[q]`` lists the external
string ids best first. Approximate indexes can find fewer than ``k'`` results for a query: the
missing tail has score ``-inf`` and is absent from ``ids[q]``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import numpy as np

log = logging.getLogger(__name__)


def _as_matrix(vecs: object, name: str, dim: int | None = None) -> np.ndarray:
    arr = np.ascontiguousarray(np.asarray(vecs, dtype=np.float32))
    if arr.ndim == 1 and arr.size == 0:
        arr = arr.reshape(0, dim or 0)
    if arr.ndim != 2:
        raise ValueError(f"{name} must be a 2-d array [n, d], got shape {arr.shape}")
    if dim is not None and arr.shape[0] and arr.shape[1] != dim:
        raise ValueError(f"{name} has dimension {arr.shape[1]}, index has {dim}")
    if not np.isfinite(arr).all():
        raise ValueError(f"{name} contains NaN or infinite values")
    return arr


def _check_ids(ids: Sequence[str], n: int, known: dict[str, int]) -> list[str]:
    ids = [str(i) for i in ids]
    if len(ids) != n:
        raise ValueError(f"{len(ids)} ids for {n} vectors")
    if len(set(ids)) != len(ids) or any(i in known for i in ids):
        raise ValueError("ids must be unique within an index")
    return ids


class ExactIndex:
    """Brute-force inner-product search with torch (``matmul`` + ``topk``).

    Args:
        dim: vector dimension (taken from the first ``add`` when ``None``).
        device: ``"cpu"``, ``"cuda"``, ``"auto"`` (CUDA when available).
    """

    kind = "exact"

    def __init__(self, dim: int | None = None, *, device: str = "cpu") -> None:
        import torch

        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        self.device = device
        self.dim = dim
        self.ids: list[str] = []
        self._pos: dict[str, int] = {}
        self._mat = torch.zeros((0, dim or 0), dtype=torch.float32, device=device)

    def __len__(self) -> int:
        return len(self.ids)

    def add(self, ids: Sequence[str], vecs: object) -> None:
        """Append vectors with their (unique, new) ids."""
        import torch

        arr = _as_matrix(vecs, "vectors", self.dim)
        ids = _check_ids(ids, arr.shape[0], self._pos)
        if not ids:
            return
        if self.dim is None:
            self.dim = arr.shape[1]
            self._mat = self._mat.reshape(0, self.dim)
        self._mat = torch.cat([self._mat, torch.from_numpy(arr).to(self.device)])
        for i in ids:
            self._pos[i] = len(self.ids)
            self.ids.append(i)

    def vectors(self) -> np.ndarray:
        return self._mat.cpu().numpy()

    def search(self, queries: object, k: int) -> tuple[np.ndarray, list[list[str]]]:
        """Top-``k`` rows by inner product for each query row."""
        import torch

        q = _as_matrix(queries, "queries", self.dim)
        kk = min(int(k), len(self.ids))
        if k < 0:
            raise ValueError(f"k must be >= 0, got {k}")
        if kk == 0 or q.shape[0] == 0:
            return np.zeros((q.shape[0], 0), dtype=np.float32), [[] for _ in range(q.shape[0])]
        sims = torch.from_numpy(q).to(self.device) @ self._mat.T
        top = torch.topk(sims, kk, dim=1)
        idx = top.indices.cpu().numpy()
        return top.values.cpu().numpy(), [[self.ids[j] for j in row] for row in idx]

    def save(self, path: str | Path) -> None:
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        np.save(path / "vectors.npy", self.vectors())
        (path / "index.json").write_text(json.dumps({"kind": "exact", "dim": self.dim, "ids": self.ids}))

    @classmethod
    def load(cls, path: str | Path, *, device: str = "cpu") -> ExactIndex:
        path = Path(path)
        meta = json.loads((path / "index.json").read_text())
        idx = cls(meta["dim"], device=device)
        idx.add(meta["ids"], np.load(path / "vectors.npy"))
        return idx


FaissKind = Literal["flat", "ivf", "hnsw"]


class FaissIndex:
    """FAISS inner-product index: ``flat`` (exact), ``ivf`` (IVF-Flat) or ``hnsw`` (HNSW-Flat).

    Args:
        dim: vector dimension (taken from the first ``add`` when ``None``).
        kind: index family.
        nlist: IVF cells; capped at the number of training vectors (trained on the first ``add``).
        train_per_cell: IVF k-means trains on a random sample of at most ``train_per_cell × nlist`` vectors.
        nprobe: IVF cells visited per query.
        M: HNSW graph degree.
        efConstruction: HNSW build beam.
        efSearch: HNSW search beam (raised to ``k`` when smaller).
        use_gpu: ``"auto"`` (GPU when faiss has GPU support and a device is visible), ``True`` or ``False``.
            HNSW always stays on the CPU.
    """

    def __init__(
        self,
        dim: int | None = None,
        *,
        kind: FaissKind = "flat",
        nlist: int = 1024,
        nprobe: int = 16,
        M: int = 32,
        efConstruction: int = 80,
        efSearch: int = 64,
        train_per_cell: int = 64,
        use_gpu: bool | str = "auto",
    ) -> None:
        if kind not in ("flat", "ivf", "hnsw"):
            raise ValueError(f"unknown faiss index kind {kind!r} (flat, ivf, hnsw)")
        self.kind = kind
        self.dim = dim
        self.params = {"nlist": nlist, "nprobe": nprobe, "M": M, "efConstruction": efConstruction, "efSearch": efSearch,
                       "train_per_cell": train_per_cell}
        self.use_gpu = use_gpu
        self.ids: list[str] = []
        self._pos: dict[str, int] = {}
        self._index = None
        self._on_gpu = False

    def __len__(self) -> int:
        return len(self.ids)

    def _gpu_wanted(self) -> bool:
        import faiss

        if self.kind == "hnsw" or self.use_gpu is False:
            return False
        has = hasattr(faiss, "StandardGpuResources") and faiss.get_num_gpus() > 0
        if self.use_gpu is True and not has:
            raise RuntimeError("use_gpu=True but this faiss build has no GPU support or no GPU is visible")
        return has

    def _build(self, train: np.ndarray) -> None:
        import faiss

        d, p = train.shape[1], self.params
        if self.kind == "flat":
            index = faiss.IndexFlatIP(d)
        elif self.kind == "hnsw":
            index = faiss.IndexHNSWFlat(d, p["M"], faiss.METRIC_INNER_PRODUCT)
            index.hnsw.efConstruction = p["efConstruction"]
        else:
            nlist = max(1, min(p["nlist"], train.shape[0]))
            index = faiss.IndexIVFFlat(faiss.IndexFlatIP(d), d, nlist, faiss.METRIC_INNER_PRODUCT)
            cap = p["train_per_cell"] * nlist
            if train.shape[0] > cap:
                train = train[np.random.default_rng(0).choice(train.shape[0], cap, replace=False)]
            index.train(train)
        if self._gpu_wanted():
            self._res = faiss.StandardGpuResources()
            index = faiss.index_cpu_to_gpu(self._res, 0, index)
            self._on_gpu = True
            log.info("faiss %s index on GPU", self.kind)
        self._index = index
        self.dim = d

    def _set_search_params(self, k: int) -> None:
        if self.kind == "ivf":
            self._index.nprobe = self.params["nprobe"]
        elif self.kind == "hnsw":
            self._index.hnsw.efSearch = max(self.params["efSearch"], k)

    def add(self, ids: Sequence[str], vecs: object) -> None:
        """Append vectors with their (unique, new) ids; an IVF index trains on the first batch."""
        arr = _as_matrix(vecs, "vectors", self.dim)
        ids = _check_ids(ids, arr.shape[0], self._pos)
        if not ids:
            return
        if self._index is None:
            self._build(arr)
        self._index.add(arr)
        for i in ids:
            self._pos[i] = len(self.ids)
            self.ids.append(i)

    def search(self, queries: object, k: int) -> tuple[np.ndarray, list[list[str]]]:
        """Top-``k`` rows by inner product for each query row (approximate for ivf/hnsw)."""
        q = _as_matrix(queries, "queries", self.dim)
        if k < 0:
            raise ValueError(f"k must be >= 0, got {k}")
        kk = min(int(k), len(self.ids))
        if kk == 0 or q.shape[0] == 0:
            return np.zeros((q.shape[0], 0), dtype=np.float32), [[] for _ in range(q.shape[0])]
        self._set_search_params(kk)
        scores, idx = self._index.search(q, kk)
        scores = np.where(idx < 0, -np.inf, scores).astype(np.float32)
        return scores, [[self.ids[j] for j in row if j >= 0] for row in idx]

    def save(self, path: str | Path) -> None:
        import faiss

        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        meta = {"kind": self.kind, "dim": self.dim, "params": self.params, "ids": self.ids}
        if self._index is not None:
            cpu = faiss.index_gpu_to_cpu(self._index) if self._on_gpu else self._index
            faiss.write_index(cpu, str(path / "faiss.index"))
        (path / "index.json").write_text(json.dumps(meta))

    @classmethod
    def load(cls, path: str | Path, *, use_gpu: bool | str = "auto") -> FaissIndex:
        import faiss

        path = Path(path)
        meta = json.loads((path / "index.json").read_text())
        idx = cls(meta["dim"], kind=meta["kind"], use_gpu=use_gpu, **meta["params"])
        if (path / "faiss.index").exists():
            index = faiss.read_index(str(path / "faiss.index"))
            if idx._gpu_wanted():
                idx._res = faiss.StandardGpuResources()
                index = faiss.index_cpu_to_gpu(idx._res, 0, index)
                idx._on_gpu = True
            idx._index = index
        idx.ids = list(meta["ids"])
        idx._pos = {i: n for n, i in enumerate(idx.ids)}
        return idx


VectorIndex = ExactIndex | FaissIndex


def make_vector_index(name: str = "exact", *, dim: int | None = None, device: str = "cpu", **params: object) -> VectorIndex:
    """Build an empty index from a config name: ``exact``, ``faiss_flat``, ``faiss_ivf``, ``faiss_hnsw``."""
    if name == "exact":
        return ExactIndex(dim, device=device)
    if name.startswith("faiss_"):
        return FaissIndex(dim, kind=name.removeprefix("faiss_"), **params)  # type: ignore[arg-type]
    raise ValueError(f"unknown vector index {name!r} (exact, faiss_flat, faiss_ivf, faiss_hnsw)")


def load_vector_index(path: str | Path, *, device: str = "cpu", use_gpu: bool | str = "auto") -> VectorIndex:
    """Load whichever index kind was saved at ``path``."""
    kind = json.loads((Path(path) / "index.json").read_text())["kind"]
    return ExactIndex.load(path, device=device) if kind == "exact" else FaissIndex.load(path, use_gpu=use_gpu)
