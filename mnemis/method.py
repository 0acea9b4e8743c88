"""One interface for every method a run compares: Mnemis, RAG, full context, Mem0 / Mem0g, the peer libraries.

A method is named by its YAML, ``conf/method/<name>.yaml``: ``_target_`` names its class and any other key is an
argument of that class's constructor (the file's name is passed as ``name``). For a run, the application
(:mod:`mnemis.app.methods`) makes the configured methods, hands each the run's inputs with :meth:`Method.prepare`
and asks it for the contexts of the run's questions with :meth:`Method.contexts`, in one batch. Answering, judging
and writing the run directory stay with the application: a method returns everything it has to say in one
:class:`MethodContexts` record.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mnemis.types import Question, RetrievedContext

if TYPE_CHECKING:  # the stages' types only: this module imports no stage
    from mnemis.components import Models
    from mnemis.settings import RunSettings
    from mnemis.store.sqlite import GraphStore
    from mnemis.types import Dataset


@dataclass(frozen=True)
class MethodRun:
    """What a method may use in a run.

    Attributes:
        settings: the run's validated settings (a method reads its own sections).
        models: the run's models (built on first use).
        data: the dataset slice: every group's episodes and the questions.
        store: the built memory's store (episodes, their vectors, the Mnemis graph).
        memory_dir: the built memory's folder; a method that builds its own memory keeps it in a sub-folder here,
            addressed by what decides its content.
    """

    settings: RunSettings
    models: Models
    data: Dataset
    store: GraphStore
    memory_dir: Path


@dataclass
class MethodContexts:
    """What a method hands back for a batch of questions.

    Attributes:
        texts: one rendered context per question, in the questions' order (what the answerer reads).
        retrieved: the raw hits behind each context (kept in the question records), or None for a method that
            has none (full context, the peers).
        recall_routes: contexts whose evidence recall the run reports in ``recall.json``, by the key they get
            there (``rag``, ``mnemis/system1``, ...); empty for none.
        files: files this method adds to the run directory: name -> text.
    """

    texts: list[str]
    retrieved: list[RetrievedContext] | None = None
    recall_routes: dict[str, list[RetrievedContext]] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)

    def check(self, method: str, questions: Sequence[Question]) -> None:
        """Raise ValueError naming ``method`` when a list does not hold one entry per question."""
        lists = {"texts": self.texts, "retrieved": self.retrieved, **{f"recall_routes[{k}]": v
                                                                       for k, v in self.recall_routes.items()}}
        bad = [f"{key} has {len(v)}" for key, v in lists.items() if v is not None and len(v) != len(questions)]
        if bad:
            raise ValueError(f"method {method!r}: {', '.join(bad)} entries for {len(questions)} questions")


def json_file(obj: Any) -> str:
    """The text of a run directory's JSON file (indented; values JSON does not know written as strings)."""
    return json.dumps(obj, indent=2, default=str)


EPISODE_VECTORS = "episode_vectors"  # the episodes' embeddings, in the shared store
GRAPH = "graph"  # Mnemis' base graph and hierarchy, in the shared store
BUILDS = (EPISODE_VECTORS, GRAPH)


class Method(ABC):
    """A method: made from its YAML, prepared with a run's inputs, then asked for contexts.

    Args:
        name: the method's name, its YAML's file name (the name of its rows, metrics and files).

    Attributes:
        builds: what the run's shared build must make in the store before this method runs (any of
            :data:`BUILDS`); a method that builds its own memory (Mem0, the peers) or needs only the stored episodes
            (full context, BM25 RAG) needs nothing of it.
    """

    builds: frozenset[str] = frozenset()

    def __init__(self, name: str) -> None:
        self.name = name
        self._run: MethodRun | None = None

    def prepare(self, run: MethodRun) -> None:
        """Take the run's inputs and make what answering needs. The memory a method builds itself is built here
        or, where its pipeline builds and searches in one resumable call (Mem0, the peers), in :meth:`contexts`;
        either way it is reused when its address already holds it."""
        self._run = run

    @property
    def run(self) -> MethodRun:
        if self._run is None:
            raise RuntimeError(f"method {self.name!r}: prepare(run) must come before contexts(questions)")
        return self._run

    @abstractmethod
    def contexts(self, questions: Sequence[Question]) -> MethodContexts:
        """One context per question (a batch: every question of the run in one call)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"
