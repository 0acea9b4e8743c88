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

One memory file is safe to share between processes: every write (``add``, ``add_episodes``, ``organize``,
``recover``...) holds the file's writer lock (``<file>.lock``) from start to end, so a second writer waits
(``store.lock_timeout_s``, then :class:`~mnemis.store.lock.StoreBusy` naming the pid that holds it); readers
(``search``, ``answer``) never wait. Messages have stable ids (:mod:`mnemis.messages`), so an ``add`` killed
half way can be repeated: each message is stored once, and the repeat (or :meth:`Memory.recover`) finishes
the extraction, resolution and summaries the killed call left undone. Times follow one rule
(:mod:`mnemis.times`): aware, in ``store.time_zone`` (UTC by default).

``organize()`` rebuilds the hierarchy of every group whose entities changed since the last build, from
scratch (the paper's method: the hierarchy is built once over the whole entity set); groups whose
entities did not change keep theirs without an LLM call. An incremental re-categorisation would give a
different hierarchy from the paper's, so it is not offered.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import datetime, tzinfo
from pathlib import Path
from typing import Any

from mnemis.address import memory_address
from mnemis.components import Models
from mnemis.messages import Message, check_group, parse_messages, source_ids
from mnemis.settings import MemorySettings, RunSettings, instantiate, load_settings
from mnemis.store import GraphStore
from mnemis.store.lock import WriterLock
from mnemis.times import in_zone, zone
from mnemis.types import Episode, Question

log = logging.getLogger(__name__)

__all__ = ["Memory", "Message", "default_path"]

ROUTES = ("both", "system1", "system2")
# the config sections that decide what a memory holds (its default file is addressed by them, as the CLI's are)
MEMORY_KEYS = ("llm", "embedder", "ingest", "hierarchy")
QUEUED = "memory.queued"  # progress stage: episodes an ``add`` stored for extraction (found by ``recover``)
OPEN = "memory.open"  # progress stage: groups whose last ``add`` has not finished (key "add")
_CONFIG = object()  # "take it from the config"


def default_path(settings: MemorySettings | RunSettings) -> Path:
    """``<paths.artifacts_dir>/memory/<address>/<store.filename>``: the address is the CLI's
    (:func:`mnemis.address.memory_address`: the build sections, the build prompts and the code version) without
    a dataset, since a library memory's messages come from its caller."""
    return Path(settings.paths.artifacts_dir) / "memory" / memory_address(settings, MEMORY_KEYS) / \
        settings.store.filename


def memory_settings(config: Any) -> MemorySettings:
    """A :class:`MemorySettings` from run or memory settings, or a composed config (plain or OmegaConf)."""
    if isinstance(config, MemorySettings):
        return config
    if isinstance(config, RunSettings):
        return config.memory()
    if type(config).__module__.startswith("omegaconf"):
        from mnemis.config import to_plain

        config = to_plain(config)
    if isinstance(config, Mapping) and "command" in config:  # a whole composed config
        return load_settings(config).memory()
    return MemorySettings.model_validate(config)


def _merged(base: dict[str, Any], extra: Mapping[str, Any], where: str = "") -> dict[str, Any]:
    """``extra`` merged into ``base`` key by key (nested sections merge; a ``_target_`` node replaces)."""
    out = dict(base)
    for k, v in extra.items():
        # a node naming its own `_target_` replaces the default one whole (another model, not a patched one)
        if isinstance(v, Mapping) and isinstance(out.get(k), Mapping) and "_target_" not in v:
            out[k] = _merged(dict(out[k]), v, f"{where}{k}.")
        else:
            out[k] = v
    return out


class Memory:
    """A long-term memory in one store file: base graph + hierarchy, read back by System-1/System-2.

    Args:
        config: its settings: a :class:`~mnemis.settings.MemorySettings` (or the run's
            :class:`~mnemis.settings.RunSettings`, or a composed config, plain or as ``compose`` returns it);
            :meth:`from_config` composes one from ``conf/``.
        path: the store file (created when missing); default :func:`default_path`.
        models: the models to use (default: built from the settings on first use, shared in the process).
        store: an open store to work on (the caller closes it); else ``path`` is opened.
        time_zone: zone of stored message times (default ``store.time_zone``, UTC): naive inputs are read in
            it, aware ones converted to it.
        lock_timeout: seconds a write waits for another process's writer lock (default
            ``store.lock_timeout_s``; None: no limit).
    """

    def __init__(self, config: Any, *, path: str | Path | None = None, models: Models | None = None,
                 store: GraphStore | None = None, time_zone: str | tzinfo | None | object = _CONFIG,
                 lock_timeout: float | None | object = _CONFIG) -> None:
        self.settings = memory_settings(config)
        st = self.settings.store
        self.time_zone = zone(st.time_zone if time_zone is _CONFIG else time_zone)
        timeout = st.lock_timeout_s if lock_timeout is _CONFIG else lock_timeout
        self.models = models or Models(self.settings.models())
        self._owns_store = store is None
        self.path = Path(store.path) if store is not None else Path(path) if path is not None else \
            default_path(self.settings)
        self._writing = WriterLock(Path(f"{self.path}.lock"), timeout=timeout, what=str(self.path))
        if store is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            store = GraphStore(self.path)
        self.store = store
        if self._owns_store:
            left = self.unfinished()
            if left:
                log.warning("memory %s: an add was stopped before it finished in group(s) %s (%d message(s) not "
                            "yet extracted); Memory.recover() or repeating that add finishes it", self.path,
                            sorted(left), sum(left.values()))

    @classmethod
    def from_config(cls, config: Sequence[str] | Mapping[str, Any] = (), *, path: str | Path | None = None,
                    **options: Any) -> Memory:
        """A memory from ``conf/``: ``config`` is a list of Hydra-style overrides (``["experiment=quickstart"]``)
        or a plain dict merged over the composed defaults (``{"experiment": "quickstart", "retrieval":
        {"k": 5}}``; an ``experiment`` key picks the experiment first). Every key is validated at once
        (:func:`mnemis.settings.load_settings`); the models are built on first use. ``options``:
        ``time_zone``, ``lock_timeout``."""
        return cls(_compose_settings(config), path=path, **options)

    @classmethod
    def from_models(cls, llm: Any, embedder: Any, reranker: Any = None, *,
                    overrides: Sequence[str] | Mapping[str, Any] = (), path: str | Path | None = None,
                    selector_llm: Any = None, answer_llm: Any = None, **options: Any) -> Memory:
        """Use model objects you built (an ``mnemis.models.llm.client.LLM``, an embedder with ``encode``,
        a reranker with ``score``); every other setting comes from ``conf/`` with ``overrides``."""
        from mnemis.components import GivenModels

        models = GivenModels(llm, embedder, reranker, selector_llm=selector_llm, answer_llm=answer_llm)
        return cls(_compose_settings(overrides), path=path, models=models, **options)  # type: ignore[arg-type]

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
        optional ``time`` (datetime or ISO string), ``session`` and ``id``. A bad argument raises
        ``TypeError`` / ``ValueError`` naming it (``messages[3].speaker: ...``) before anything is stored.
        Messages already stored (a repeated ``add``: same ids, or the same batch) are not stored again, and
        whatever a killed earlier call left unfinished in ``group`` is finished. Returns the build stats
        (``counters["add.new"]``, ``counters["add.repeated"]``).
        """
        check_group(group)
        parsed = parse_messages(messages)
        with self._writing():
            new, repeated = self._episodes(group, parsed)
            with self.store.transaction():  # stored, queued and marked open together: a kill from here on
                self.store.upsert_episodes(new)  # leaves them for recover() or a repeated add
                self.store.mark_done(QUEUED, group, [e.id for e in new])
                self.store.mark_done(OPEN, group, ["add"])
            left = self.store.progress_episodes((QUEUED, "extract"), unfinished=self._stages(),
                                                group_id=group).get(group, [])
            have = {e.id for e in new + repeated}
            stats = self.add_episodes(new + repeated + self.store.episodes(group, [i for i in left if i not in have]))
            self.store.clear_progress(OPEN, group)
        stats.counters["add.new"] += len(new)
        stats.counters["add.repeated"] += len(repeated)
        return stats

    def _episodes(self, group: str, messages: Sequence[Message]) -> tuple[list[Episode], list[Episode]]:
        """(episodes to store, episodes already stored) for ``messages``; called under the writer lock."""
        ids = [Episode.make_id(group, s) for s in source_ids(group, messages)]
        stored = {e.id: e for e in self.store.episodes(group, ids)}
        last = self.store.last_episode(group)
        pos = last.position + 1 if last is not None else 0
        session = last.session if last is not None else 1
        naive = last is not None and last.valid_at.tzinfo is None  # a group built from a benchmark stays naive
        now = datetime.now(self.time_zone)
        new, repeated = [], []
        for i, (m, eid) in enumerate(zip(messages, ids)):
            content = f"{m.speaker}: {m.text}"
            if eid in stored:
                old = stored[eid]
                if old.content != content:
                    raise ValueError(f"messages[{i}].id: {m.id!r} is already stored in group {group!r} with "
                                     f"other content ({old.content[:80]!r}); a stored message is never replaced")
                repeated.append(old)
                continue
            when = in_zone(m.time, self.time_zone) if m.time is not None else now
            if naive:
                when = when.replace(tzinfo=None)
            src = eid[len(group) + 1:]
            new.append(Episode(group_id=group, id=eid, source_id=src, name=f"message {pos}", speaker=m.speaker,
                               content=content, valid_at=when,
                               session=m.session if m.session is not None else session, turn=pos, position=pos))
            pos += 1
        return new, repeated

    def _stages(self) -> tuple[str, ...]:
        """The progress stages every extracted episode ends with (per the ingest settings)."""
        from mnemis.ingest.attributes import EPISODE_STAGE

        refresh = self.settings.ingest["attribute_refresh"]
        return ("extract", "resolve", "facts") + ((EPISODE_STAGE,) if refresh == "episode" else ())

    def unfinished(self) -> dict[str, int]:
        """The groups a stopped ``add`` left unfinished, each with how many of its messages are not yet
        extracted and resolved (0: only summaries or embeddings are left); :meth:`recover` finishes them."""
        out = {}
        for g in self.store.progress_groups(OPEN):
            left = self.store.progress_episodes((QUEUED, "extract"), unfinished=self._stages(), group_id=g)
            out[g] = len(left.get(g, []))
        return out

    def recover(self, groups: Sequence[str] | None = None) -> Any:
        """Finish what stopped writes left undone in ``groups`` (default: the groups of :meth:`unfinished` and
        any with half-processed messages): the extraction, resolution, summaries and embeddings of every
        message they stored. Makes no LLM call when nothing is left to do. Returns the build stats."""
        with self._writing():
            if groups is None:
                half = self.store.progress_episodes((QUEUED, "extract"), unfinished=self._stages())
                targets = sorted(set(half) | set(self.store.progress_groups(OPEN)))
            else:
                targets = [check_group(g) for g in groups]
            episodes = []
            for g in targets:
                started = self.store.progress_episodes((QUEUED, "extract"), group_id=g).get(g, [])
                episodes += self.store.episodes(g, started)
            stats = self.add_episodes(episodes)
            for g in targets:
                self.store.clear_progress(OPEN, g)
            return stats

    def add_episodes(self, episodes: Sequence[Episode]) -> Any:
        """Extract ``episodes`` (any groups) into the base graph in one batch per stage; resumable. A group's
        times are all naive or all aware: an episode of the other kind is refused (``ValueError``)."""
        episodes = list(episodes)
        with self._writing():
            self._check_time_kinds(episodes)
            builder = instantiate(self.settings.ingest)(store=self.store, llm=self.models.llm,
                                                        embedder=self.models.embedder)
            return builder.ingest(episodes)

    def _check_time_kinds(self, episodes: Sequence[Episode]) -> None:
        kinds: dict[str, tuple[bool, str]] = {}
        for e in episodes:
            if e.group_id not in kinds:
                last = self.store.last_episode(e.group_id)
                ref = last or e
                kinds[e.group_id] = (ref.valid_at.tzinfo is None, ref.id)
            naive, ref_id = kinds[e.group_id]
            if (e.valid_at.tzinfo is None) != naive:
                raise ValueError(f"episode {e.id}: its time {e.valid_at.isoformat()} is "
                                 f"{'aware' if naive else 'naive'} but group {e.group_id!r} holds "
                                 f"{'naive' if naive else 'aware'} times ({ref_id}); give all one kind")

    def store_episodes(self, episodes: Sequence[Episode]) -> None:
        """Keep ``episodes`` without extraction (the baselines read them; no LLM call)."""
        with self._writing(), self.store.transaction():
            self.store.upsert_episodes(list(episodes))

    def embed_episodes(self, groups: Sequence[str]) -> dict[str, int]:
        """Embed the episodes of ``groups`` that have no vector yet (RAG's index)."""
        from mnemis.ingest.embed_items import embed_missing

        with self._writing():
            return embed_missing(self.store, self.models.embedder, list(groups), kinds=("episode",))

    def organize(self, groups: Sequence[str] | None = None) -> dict[str, Any]:
        """Build the hierarchy of ``groups`` (default: all); returns its metrics per group.

        A full rebuild of each group whose entity set changed since its last build; unchanged groups keep
        theirs without an LLM call (see the module docstring for why this is not incremental).
        """
        from mnemis.hierarchy import organize

        groups = self.groups() if groups is None else list(groups)
        with self._writing():
            metrics = organize(self.store, self.models.llm, groups, instantiate(self.settings.hierarchy),
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

    def retrieve(self, questions: Sequence[Question], route: str = "both") -> Any:
        """Retrieval for typed questions: a ``RetrievalOutput`` (fused contexts, rendered texts, and per
        route the System-1 hits and the System-2 traversals)."""
        from mnemis.retrieve.pipeline import run_retrieval

        cfg = self.settings.retrieval.for_route(route)
        reranker = self.models.reranker if cfg.fusion.scorer == "reranker" else None
        needs_llm = route in ("both", "system2") and cfg.system2.enabled
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
        cfg = self.settings.answer
        return answer_questions(self.models.answer_llm, qs, res.texts, max_tokens=cfg.max_tokens,
                                prompt=answer_prompt_for(cfg, "mnemis"), temperature=cfg.temperature)


def _compose_settings(config: Sequence[str] | Mapping[str, Any]) -> RunSettings:
    """Compose ``conf/`` (the edge of the library: the only place it meets the config framework) with a list of
    overrides, or with a plain dict merged over the defaults, and validate the result."""
    from mnemis.config import compose, to_plain

    if isinstance(config, (str, bytes)):
        raise TypeError("config: expected a list of overrides or a dict, got a string (wrap it in [...])")
    from mnemis.logs import quiet_third_party

    if isinstance(config, Mapping):
        extra = dict(config)
        experiment = extra.pop("experiment", None)
        plain = to_plain(compose([f"experiment={experiment}"] if experiment else []))
        settings = load_settings(_merged(plain, extra))
    else:
        settings = load_settings(to_plain(compose(list(config))))
    quiet_third_party(settings.verbose)  # third-party logs off unless verbose=true, as on the CLI
    return settings
