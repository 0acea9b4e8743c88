"""The peer libraries as methods of a run (``conf/method/graphiti.yaml``, ``conf/method/mem0_oss.yaml``)."""

from __future__ import annotations

from collections.abc import Sequence

from mnemis.address import config_hash, drop_fields, values
from mnemis.baselines.peers.common import PEER_METHODS, run_peer
from mnemis.method import Method, MethodContexts, json_file
from mnemis.types import Question


class PeerMethod(Method):
    """``graphiti`` or ``mem0_oss``: :func:`~mnemis.baselines.peers.common.run_peer` with the run's ``peers``
    section, ``llm`` and ``embedder`` (and, for Graphiti's cross-encoder, ``reranker``).

    The library's memory lives in ``<memory_dir>/<name>-<hash>``, addressed by the method, the ``peers`` section
    (without its log file), the dataset and the two models; a failure of the library is counted in
    ``<name>_stats.json`` and gives empty contexts, never an error.
    """

    def __init__(self, name: str) -> None:
        if name not in PEER_METHODS:
            raise ValueError(f"peer method {name!r}: the peers are {list(PEER_METHODS)}")
        super().__init__(name)

    def contexts(self, questions: Sequence[Question]) -> MethodContexts:
        run, s = self.run, self.run.settings
        view = {"method": self.name, "peers": drop_fields(values(s.peers), frozenset({"server_log"})),
                "dataset": values(s.dataset), "llm": s.llm, "embedder": s.embedder}
        work = run.memory_dir / f"{self.name}-{config_hash(view, sorted(view))}"
        reranker = s.reranker if self.name == "graphiti" else None  # built in the peer's own process
        out = run_peer(self.name, run.data, questions, s.peers, s.llm, s.embedder, reranker, work)
        return MethodContexts(out.contexts, files={f"{self.name}_stats.json": json_file(out.summary())})
