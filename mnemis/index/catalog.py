"""Per-(group, item type) search indexes built from a graph store and cached as derived data.

Item types and their sources:

=========  =========================  ===================================
item       BM25 text                  vector (store embedding kind)
=========  =========================  ===================================
episode    ``BM25_RECIPE`` text       ``episode``
entity     ``name: summary``          ``entity_summary``
fact       fact sentence              ``fact``
=========  =========================  ===================================

Indexes live in memory once built and on disk under ``<store path>.indexes/<group>/<item>-<settings>/``
(BM25 and FAISS; an exact index is rebuilt from the stored vectors, which costs one read). The folder name
carries a hash of the index settings (vector index, BM25 analyzer, episode text recipe), so runs with
other settings keep their own copies. A cached index is reused only when its fingerprint matches: a hash
of the item ids, their texts, the embedded ids and vector bytes and every index setting. Anything else
(new items, edited text, re-embedding) rebuilds it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from mnemis.index.bm25 import BM25Index
from mnemis.index.vector import VectorIndex, load_vector_index, make_vector_index
from mnemis.locks import file_lock
from mnemis.paths import safe_name
from mnemis.texts import BM25_RECIPE, EpisodeRecipe, item_texts

log = logging.getLogger(__name__)


class ItemSource(Protocol):
    """What the catalog reads from a graph store (:class:`mnemis.store.sqlite.GraphStore` is one): the file it
    lives in, every item of a group, and stored embeddings. Indexes are built from arrays the store hands over;
    the index layer never imports the store."""

    path: Path

    def episodes(self, group_id: str) -> list[Any]: ...

    def entities(self, group_id: str) -> list[Any]: ...

    def facts(self, group_id: str) -> list[Any]: ...

    def categories(self, group_id: str) -> list[Any]: ...

    def embeddings(self, group_id: str, kind: str) -> tuple[list[str], np.ndarray]: ...

ITEM_EMBEDDING = {"episode": "episode", "entity": "entity_summary", "fact": "fact"}
ITEM_TEXT = {"episode": "episode", "entity": "entity_summary", "fact": "fact"}


@dataclass
class ItemIndexes:
    """The indexes of one (group, item type)."""

    group_id: str
    item: str
    ids: list[str]
    bm25: BM25Index
    vector: VectorIndex | None
    fingerprint: str
    unembedded: int = 0
    texts: list[str] = field(default_factory=list, repr=False)

    def __len__(self) -> int:
        return len(self.ids)


class IndexCatalog:
    """Builds, caches and serves the BM25 + vector indexes of every (group, item type).

    Args:
        store: the graph store.
        vector: vector index name (``exact``, ``faiss_flat``, ``faiss_ivf``, ``faiss_hnsw``).
        vector_params: keyword arguments of the vector index (``nlist``, ``M`` ...).
        bm25_params: keyword arguments of :class:`BM25Index` (``stem``, ``k1`` ...).
        recipe: episode text recipe for the BM25 side (the vector side uses whatever was embedded).
        cache_dir: folder for saved indexes; ``"auto"`` = ``<store path>.indexes``; ``None`` = memory only.
        device: torch device of exact indexes.
    """

    def __init__(
        self,
        store: ItemSource,
        *,
        vector: str = "exact",
        vector_params: dict | None = None,
        bm25_params: dict | None = None,
        recipe: EpisodeRecipe = BM25_RECIPE,
        cache_dir: str | Path | None = "auto",
        device: str = "cpu",
    ) -> None:
        self.store = store
        self.vector = vector
        self.vector_params = dict(vector_params or {})
        self.bm25_params = dict(bm25_params or {})
        self.recipe = recipe
        self.device = device
        if cache_dir == "auto":
            cache_dir = Path(str(store.path) + ".indexes")
        self.cache_dir = Path(cache_dir) if cache_dir is not None else None
        self._mem: dict[tuple[str, str], ItemIndexes] = {}

    def invalidate(self, group_id: str | None = None) -> None:
        """Forget in-memory indexes (of one group, or all) so the next ``get`` re-checks the store."""
        for key in list(self._mem):
            if group_id is None or key[0] == group_id:
                del self._mem[key]

    def get(self, group_id: str, item: str) -> ItemIndexes:
        """The indexes of ``item`` (``episode``, ``entity``, ``fact``) in ``group_id``, built if needed."""
        if item not in ITEM_EMBEDDING:
            raise ValueError(f"unknown item type {item!r} (episode, entity, fact)")
        key = (group_id, item)
        if key not in self._mem:
            self._mem[key] = self._load_or_build(group_id, item)
        return self._mem[key]

    # ------------------------------------------------------------------ internals
    def settings_key(self) -> str:
        """Short hash of every index setting (vector index, BM25 analyzer, episode text recipe): the cache
        folder of a (group, item) is ``<item>-<settings_key>``, so indexes built with different settings
        (``mode=paper`` vs the default) live side by side and are never served to one another."""
        settings = {"vector": self.vector, "vp": self.vector_params, "bm": self.bm25_params, "r": self.recipe.key()}
        return hashlib.sha1(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:12]

    def _fingerprint(self, ids: list[str], texts: list[str], vids: list[str], vecs: np.ndarray) -> str:
        h = hashlib.sha1()
        h.update(self.settings_key().encode())
        for part in (ids, texts, vids):
            h.update(json.dumps(part).encode())
        h.update(np.ascontiguousarray(vecs, dtype=np.float32).tobytes())
        return h.hexdigest()

    def _load_or_build(self, group_id: str, item: str) -> ItemIndexes:
        ids, texts = item_texts(self.store, group_id, ITEM_TEXT[item], self.recipe)
        known = set(ids)
        vids, vecs = self.store.embeddings(group_id, ITEM_EMBEDDING[item])
        keep = [n for n, i in enumerate(vids) if i in known]  # drop vectors of deleted items
        if len(keep) != len(vids):
            vids, vecs = [vids[n] for n in keep], vecs[keep]
        fp = self._fingerprint(ids, texts, vids, vecs)
        folder = None if self.cache_dir is None else \
            self.cache_dir / safe_name(group_id, hashed=True) / f"{item}-{self.settings_key()}"
        if folder is not None:
            loaded = self._try_load(folder, fp, group_id, item, ids, texts, vids, vecs)
            if loaded is not None:
                return loaded
        bm25 = BM25Index(texts, ids, **self.bm25_params)
        vector = None
        if vids:
            vector = make_vector_index(self.vector, dim=vecs.shape[1], device=self.device, **self.vector_params)
            vector.add(vids, vecs)
        built = ItemIndexes(group_id, item, ids, bm25, vector, fp, len(ids) - len(vids), texts)
        if folder is not None:
            self._save(folder, built)
        return built

    def _try_load(self, folder: Path, fp: str, group_id: str, item: str, ids, texts, vids, vecs) -> ItemIndexes | None:
        if not (folder / "manifest.json").exists():
            return None
        with file_lock(_lock_file(folder), shared=True):  # never half of one save and half of another
            return self._load(folder, fp, group_id, item, ids, texts, vids, vecs)

    def _load(self, folder: Path, fp: str, group_id: str, item: str, ids, texts, vids, vecs) -> ItemIndexes | None:
        try:
            if json.loads((folder / "manifest.json").read_text()).get("fingerprint") != fp:
                log.info("index %s/%s is stale; rebuilding", group_id, item)
                return None
            bm25 = BM25Index.load(folder / "bm25")
            vector = None
            if vids:
                if self.vector == "exact":
                    vector = make_vector_index("exact", dim=vecs.shape[1], device=self.device)
                    vector.add(vids, vecs)
                else:
                    vector = load_vector_index(folder / "vector", use_gpu=self.vector_params.get("use_gpu", "auto"))
        except (OSError, ValueError, KeyError) as err:  # a damaged cache is rebuilt, never trusted
            log.warning("index cache %s unreadable (%s); rebuilding", folder, err)
            return None
        return ItemIndexes(group_id, item, ids, bm25, vector, fp, len(ids) - len(vids), texts)

    def _save(self, folder: Path, built: ItemIndexes) -> None:
        """Write the index into a fresh temporary folder, then swap it in, all under the folder's lock: two
        processes saving at once never mix their files, and a reader never sees a half-written index."""
        folder.parent.mkdir(parents=True, exist_ok=True)
        with file_lock(_lock_file(folder)):
            if _manifest(folder).get("fingerprint") == built.fingerprint:
                return  # another process saved this very index meanwhile
            for stale in folder.parent.glob(f".{folder.name}.*-*"):  # left by a killed save (we hold the lock)
                shutil.rmtree(stale, ignore_errors=True)
            tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.tmp-", dir=folder.parent))
            old = folder.with_name(f".{folder.name}.old-{tmp.name.rsplit('-', 1)[-1]}")
            try:
                built.bm25.save(tmp / "bm25")
                if built.vector is not None and self.vector != "exact":
                    built.vector.save(tmp / "vector")
                (tmp / "manifest.json").write_text(json.dumps({"fingerprint": built.fingerprint, "n": len(built.ids)}))
                if folder.exists():
                    folder.rename(old)
                tmp.rename(folder)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
                shutil.rmtree(old, ignore_errors=True)


def _lock_file(folder: Path) -> Path:
    return folder.with_name(f".{folder.name}.lock")


def _manifest(folder: Path) -> dict:
    try:
        data = json.loads((folder / "manifest.json").read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
