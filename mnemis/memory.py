"""``Memory``: Mnemis as a library. Add messages, organise them into a hierarchy, search, answer.

One object over the components the CLI uses (the CLI's ``build``/``eval``/``run`` jobs call the same
methods, so there is one composition path)::

    from mnemis import Memory

    mem = Memory.from_config(["experiment=quickstart"], path="my_memory.db")
    mem.add("alice", [{"speaker": "Alice", "text": "I adopted a cat named Miso.", "time": "2024-05-01T10:00"}])
    mem.organize()
    hits = mem.search(["What is the name of Alice's cat?"], group="alice")
    answers = mem.answer(["What is the name of Alice's cat?"], group="alice")

Every method takes a batch: all messages of one ``add`` go through extraction as one batch per stage,
and all questions of one ``search``/``answer`` through one batched retrieval and one answer batch.

``organize()`` rebuilds the hierarchy of every group whose entities changed since the last build, from
scratch (the paper's method: the hierarchy is built once over the whole entity set); groups whose
entities did not change keep theirs without an LLM call. An incremental re-categorisation would give a
different hierarchy from the paper's, so it is not offered.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from mnemis.components import Models
from mnemis.config import build, compose, config_hash, drop_fields, to_plain
from mnemis.store import GraphStore
from mnemis.types import Episode, Question

log = logging.getLogger(__name__)

ROUTES = ("both", "system1", "system2")
# the config sections that decide what a memory holds (a library memory's default file is addressed by them)
MEMORY_KEYS = ("llm", "embedder", "ingest", "hierarchy")


class Message(BaseModel):
    """One message to remember. ``time`` defaults to now (UTC); ``session`` to the group's last one.
    Stored as the episode text ``"<speaker>: <text>"``, as the benchmark loaders store a turn."""

    model_config = {"extra": "forbid"}

    speaker: str = Field(min_length=1)
    text: str = Field(min_length=1)
    time: datetime | None = None
    session: int | None = Field(None, ge=0)


def _message(item: Any, where: str) -> Message:
    if isinstance(item, Message):
        return item
    if not isinstance(item, Mapping):
        raise TypeError(f"{where}: expected a dict with speaker, text (and optional time, session), "
                         f"got {type(item).__name__}")
    item = dict(item)
    if "content" in item and "text" not in item:  # the Episode / chat-message spelling: "<speaker>: <text>"
        content, speaker = item.pop("content"), item.get("speaker")
        if isinstance(content, str) and isinstance(speaker, str) and content.startswith(f"{speaker}: "):
            content = content[len(speaker) + 2:]
        item["text"] = content
    try:
        return Message.model_validate(item)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(x) for x in first["loc"]) or "message"
        raise ValueError(f"{where}.{field}: {first['msg']}") from None


def default_path(plain: Mapping[str, Any]) -> Path:
    """``<paths.artifacts_dir>/memory/<hash of the memory-shaping config>/<store.filename>``."""
    view = {k: drop_fields(plain.get(k), frozenset({"cache_dir", "cache_mode", "show_progress"}))
            for k in MEMORY_KEYS if k in plain}
    return Path(plain["paths"]["artifacts_dir"]) / "memory" / config_hash(view, sorted(view)) / \
        plain["store"]["filename"]


class Memory:
    """A long-term memory in one store file: base graph + hierarchy, read back by System-1/System-2.

    Args:
        cfg: the composed config (an OmegaConf node, as ``mnemis.config.compose`` returns).
        path: the store file (created when missing); default :func:`default_path`.
        models: the models to use (default: built from ``cfg`` on first use, shared in the process).
        plain: ``cfg`` as plain values, when the caller has it already.
        store: an open store to work on (the caller closes it); else ``path`` is opened.
    """

    def __init__(self, cfg: Any, *, path: str | Path | None = None, models: Models | None = None,
                 plain: dict[str, Any] | None = None, store: GraphStore | None = None) -> None:
        self.cfg = cfg
        self.plain = plain if plain is not None else to_plain(cfg)
        self.models = models or Models(cfg, self.plain)
        self._owns_store = store is None
        if store is None:
            self.path = Path(path) if path is not None else default_path(self.plain)
            self.path.parent.mkdir(parents=True, exist_ok=True)
            store = GraphStore(self.path)
        else:
            self.path = Path(store.path)
        self.store = store

    @classmethod
    def from_config(cls, overrides: Sequence[str] = (), *, path: str | Path | None = None) -> Memory:
        """Compose ``conf/`` with Hydra-style ``overrides`` (e.g. ``["experiment=quickstart"]``); the models
        are built from it on first use."""
        return cls(compose(list(overrides)), path=path)

    @classmethod
    def from_models(cls, llm: Any, embedder: Any, reranker: Any = None, *, overrides: Sequence[str] = (),
                    path: str | Path | None = None, selector_llm: Any = None, answer_llm: Any = None) -> Memory:
        """Use model objects you built (an ``mnemis.models.llm.client.LLM``, an embedder with ``encode``,
        a reranker with ``score``); every other setting comes from ``conf/`` with ``overrides``."""
        from mnemis.components import GivenModels

        cfg = compose(list(overrides))
        models = GivenModels(llm, embedder, reranker, selector_llm=selector_llm, answer_llm=answer_llm)
        return cls(cfg, path=path, models=models)  # type: ignore[arg-type]

    def ledger(self) -> Any:
        """Tokens and calls per LLM stage so far (every LLM of this memory, shared engines counted once)."""
        return self.models.ledger()

    # ------------------------------------------------------------------ lifecycle
    def close(self) -> None:
        if self._owns_store:
            self.store.close()

    def __enter__(self) -> Memory:  # noqa: PYI034
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def groups(self) -> list[str]:
        return sorted(self.store.groups())

    def counts(self, group: str) -> dict[str, int]:
        return self.store.counts(group)

    # ------------------------------------------------------------------ writing
    def add(self, group: str, messages: Sequence[Message | Mapping[str, Any]]) -> Any:
        """Append ``messages`` (in order) to ``group`` and extract them into the base graph, as one batch.

        Each message is a :class:`Message` or a dict with ``speaker``, ``text`` (or ``content``) and
        optional ``time`` (datetime or ISO string) and ``session``. A bad item raises ``ValueError``
        naming it (``messages[3].speaker: ...``) before anything is stored. Returns the build stats.
        """
        if not isinstance(group, str) or not group:
            raise ValueError(f"group: expected a non-empty string, got {group!r}")
        if isinstance(messages, (str, bytes, Mapping)):
            raise TypeError("messages: expected a list of messages")
        parsed = [_message(m, f"messages[{i}]") for i, m in enumerate(messages)]
        return self.add_episodes(self._episodes(group, parsed))

    def _episodes(self, group: str, messages: Sequence[Message]) -> list[Episode]:
        before = self.store.episodes(group)
        pos = max((e.position for e in before), default=-1) + 1
        session = max((e.session for e in before), default=1)
        last = max((e.valid_at for e in before), default=None)
        out = []
        for i, m in enumerate(messages):
            when = m.time or datetime.now(timezone.utc)
            if last is not None and when.tzinfo is None and last.tzinfo is not None:
                when = when.replace(tzinfo=last.tzinfo)
            sess = m.session if m.session is not None else session
            src = f"m{pos + i}"
            out.append(Episode(group_id=group, id=Episode.make_id(group, src), source_id=src, name=f"message {pos + i}",
                               speaker=m.speaker, content=f"{m.speaker}: {m.text}", valid_at=when, session=sess, turn=pos + i,
                               position=pos + i))
        return out

    def add_episodes(self, episodes: Sequence[Episode]) -> Any:
        """Extract ``episodes`` (any groups) into the base graph in one batch per stage; resumable."""
        builder = build(self.cfg.ingest)(store=self.store, llm=self.models.llm, embedder=self.models.embedder)
        return builder.ingest(list(episodes))

    def store_episodes(self, episodes: Sequence[Episode]) -> None:
        """Keep ``episodes`` without extraction (the baselines read them; no LLM call)."""
        with self.store.transaction():
            self.store.upsert_episodes(list(episodes))

    def embed_episodes(self, groups: Sequence[str]) -> dict[str, int]:
        """Embed the episodes of ``groups`` that have no vector yet (RAG's index)."""
        from mnemis.ingest.embed_items import embed_missing

        return embed_missing(self.store, self.models.embedder, list(groups), kinds=("episode",))

    def organize(self, groups: Sequence[str] | None = None) -> dict[str, Any]:
        """Build the hierarchy of ``groups`` (default: all); returns its metrics per group.

        A full rebuild of each group whose entity set changed since its last build; unchanged groups keep
        theirs without an LLM call (see the module docstring for why this is not incremental).
        """
        from mnemis.hierarchy import organize

        groups = self.groups() if groups is None else list(groups)
        metrics = organize(self.store, self.models.llm, groups, build(self.cfg.hierarchy),
                           embedder=self.models.embedder)
        return {g: m.model_dump() if hasattr(m, "model_dump") else m for g, m in metrics.items()}

    # ------------------------------------------------------------------ reading
    def _questions(self, questions: Sequence[str | Question], group: str | None) -> list[Question]:
        if isinstance(questions, (str, bytes)):
            raise TypeError("questions: expected a list (wrap a single question in [...])")
        known = set(self.store.groups())
        out = []
        for i, q in enumerate(questions):
            if isinstance(q, Question):
                out.append(q)
                continue
            if not isinstance(q, str) or not q.strip():
                raise ValueError(f"questions[{i}]: expected a non-empty string or a Question, got {q!r}")
            if group is None:
                raise ValueError(f"questions[{i}]: a question given as text needs group=...")
            out.append(Question(group_id=group, id=f"{group}:q{i}", question=q, answer="", category="unknown",
                                index=i))
        for i, q in enumerate(out):
            if q.group_id not in known:
                raise ValueError(f"questions[{i}]: group {q.group_id!r} is not in this memory "
                                 f"({self.path}); it has {sorted(known)}")
        return out

    def _retrieval_cfg(self, route: str) -> dict[str, Any]:
        if route not in ROUTES:
            raise ValueError(f"route={route!r}: choose one of {list(ROUTES)}")
        cfg = {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in self.plain["retrieval"].items()}
        cfg["fusion"] = dict(cfg.get("fusion") or {})
        if route != "both":
            cfg["fusion"]["mode"] = route
            if route == "system1":
                cfg["system2"] = {**(cfg.get("system2") or {}), "enabled": False}
        return cfg

    def retrieve(self, questions: Sequence[Question], route: str = "both") -> Any:
        """Retrieval for typed questions: a ``RetrievalOutput`` (fused contexts, rendered texts, and per
        route the System-1 hits and the System-2 traversals)."""
        from mnemis.retrieve.pipeline import run_retrieval

        cfg = self._retrieval_cfg(route)
        reranker = self.models.reranker if (cfg.get("fusion") or {}).get("scorer") == "reranker" else None
        needs_llm = route in ("both", "system2") and (cfg.get("system2") or {}).get("enabled", True)
        return run_retrieval(self.store, list(questions), cfg, embedder=self.models.embedder,
                             llm=self.models.selector_llm if needs_llm else None, reranker=reranker)

    def search(self, questions: Sequence[str | Question], *, group: str | None = None,
               route: str = "both") -> Any:
        """Retrieve for ``questions`` (texts, with ``group=``; or ``Question`` records) in one batch.

        ``route``: ``both`` (System-1 + System-2, fused by the configured scorer), ``system1`` or
        ``system2``. Returns a ``RetrievalOutput``: ``.contexts`` (typed hits per item type), ``.texts``
        (the rendered memory the answerer sees), ``.system2`` (each question's traversal).
        """
        return self.retrieve(self._questions(questions, group), route)

    def answer(self, questions: Sequence[str | Question], *, group: str | None = None,
               route: str = "both") -> list[Any]:
        """Search, then answer each question from its rendered memory with the configured answer model
        and prompt; returns one ``AnswerRecord`` per question (``.answer``, ``.error``)."""
        from mnemis.eval.answer import answer_questions
        from mnemis.prompts.answer import answer_prompt_for

        qs = self._questions(questions, group)
        res = self.retrieve(qs, route)
        cfg = self.plain.get("answer") or {}
        return answer_questions(self.models.answer_llm, qs, res.texts, max_tokens=int(cfg.get("max_tokens", 256)),
                                prompt=answer_prompt_for(cfg, "mnemis"),
                                temperature=float(cfg.get("temperature") or 0.0))
