"""BM25 full-text index (bm25s) with English stopwords and Snowball (PyStemmer) stemming.

Tokenisation: lower-case, ``\\w\\w+`` tokens (scikit-learn's pattern, as bm25s), English stopwords from
bm25s, then the Snowball English stemmer. The same function tokenises documents and queries. Only
documents sharing at least one term with the query are returned (BM25 score > 0), so a result list can
be shorter than ``k``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

import numpy as np

_TOKEN = re.compile(r"(?u)\b\w\w+\b")


@lru_cache(maxsize=4)
def _stemmer(language: str):
    import Stemmer

    return Stemmer.Stemmer(language)


@lru_cache(maxsize=1)
def _stopwords_en() -> frozenset[str]:
    from bm25s.stopwords import STOPWORDS_EN

    return frozenset(STOPWORDS_EN)


def tokenize(texts: Sequence[str], *, stem: bool = True, stopwords: bool = True) -> list[list[str]]:
    """Tokens of each text (lower-cased, stopwords removed, stemmed), batch in, batch out."""
    stop = _stopwords_en() if stopwords else frozenset()
    stemmer = _stemmer("english") if stem else None
    out = []
    for text in texts:
        toks = [t for t in _TOKEN.findall(text.lower()) if t not in stop]
        out.append(stemmer.stemWords(toks) if stemmer is not None else toks)
    return out


class BM25Index:
    """BM25 over a fixed list of texts with external string ids.

    Args:
        texts: document texts.
        ids: one unique id per text.
        stem: apply the Snowball English stemmer.
        stopwords: drop English stopwords.
        k1, b, method: BM25 parameters (bm25s ``method``: ``lucene``, ``robertson``, ``atire``, ``bm25l``, ``bm25+``).
    """

    def __init__(
        self,
        texts: Sequence[str],
        ids: Sequence[str],
        *,
        stem: bool = True,
        stopwords: bool = True,
        k1: float = 1.2,
        b: float = 0.75,
        method: str = "lucene",
        _retriever: object | None = None,
    ) -> None:
        import bm25s

        if len(texts) != len(ids):
            raise ValueError(f"{len(texts)} texts for {len(ids)} ids")
        self.ids = [str(i) for i in ids]
        if len(set(self.ids)) != len(self.ids):
            raise ValueError("ids must be unique within an index")
        self.config = {"stem": stem, "stopwords": stopwords, "k1": k1, "b": b, "method": method}
        self._retriever = _retriever
        if self._retriever is None and self.ids:
            self._retriever = bm25s.BM25(k1=k1, b=b, method=method)
            tokens = tokenize(texts, stem=stem, stopwords=stopwords)
            # bm25s rejects an all-empty corpus; a sentinel token that no query can produce keeps it valid.
            tokens = [t if t else ["\x00"] for t in tokens]
            self._retriever.index(tokens, show_progress=False)

    def __len__(self) -> int:
        return len(self.ids)

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of every document for one query, float32 ``[N]``."""
        toks = tokenize([query], stem=self.config["stem"], stopwords=self.config["stopwords"])[0]
        if not self.ids:
            return np.zeros(0, dtype=np.float32)
        ids = self._retriever.get_tokens_ids(toks)
        if not ids:
            return np.zeros(len(self.ids), dtype=np.float32)
        return np.asarray(self._retriever.get_scores(ids), dtype=np.float32)

    def search(self, queries: Sequence[str], k: int) -> tuple[list[np.ndarray], list[list[str]]]:
        """Top-``k`` documents with a positive score for each query: ``(scores per query, ids per query)``."""
        if k < 0:
            raise ValueError(f"k must be >= 0, got {k}")
        all_scores, all_ids = [], []
        for query in queries:
            s = self.scores(query)
            pos = np.flatnonzero(s > 0)
            if k and pos.size:
                if pos.size > k:
                    # keep every document scoring at least the k-th best score, ties included: which of
                    # several tied documents argpartition keeps depends on the CPU (numpy's AVX-512 select
                    # differs from its scalar one), and a machine-dependent top k would break exact replays
                    kth = np.partition(-s[pos], k - 1)[k - 1]
                    pos = pos[-s[pos] <= kth]
                pos = pos[np.lexsort((pos, -s[pos]))][:k]  # score desc, then document order
            else:
                pos = pos[:0]
            all_scores.append(s[pos])
            all_ids.append([self.ids[j] for j in pos])
        return all_scores, all_ids

    def save(self, path: str | Path) -> None:
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        if self._retriever is not None:
            self._retriever.save(str(path / "bm25s"), show_progress=False)
        (path / "bm25.json").write_text(json.dumps({"config": self.config, "ids": self.ids}))

    @classmethod
    def load(cls, path: str | Path) -> BM25Index:
        import bm25s

        path = Path(path)
        meta = json.loads((path / "bm25.json").read_text())
        retriever = None
        if meta["ids"]:
            retriever = bm25s.BM25.load(str(path / "bm25s"), show_progress=False)
        return cls([""] * len(meta["ids"]), meta["ids"], **meta["config"], _retriever=retriever)
