"""What graphiti-core needs from us, shared by the Graphiti builder and the Graphiti peer method: our embedder and
reranker behind its client interfaces, its full-text indexes on Kuzu, and a group's nodes or edges read back.
graphiti-core is imported inside each function, so the release the caller put first is the one used."""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)


def graphiti_clients(embedder: Any, reranker: Any):
    """Our embedder and reranker as Graphiti's ``EmbedderClient`` / ``CrossEncoderClient``."""
    from graphiti_core.cross_encoder.client import CrossEncoderClient
    from graphiti_core.embedder.client import EmbedderClient

    class OurEmbedder(EmbedderClient):
        async def create(self, input_data):  # one text (or a one-text list) -> one vector
            text = input_data if isinstance(input_data, str) else next(iter(input_data), "")
            return embedder.encode([str(text)])[0].tolist()

        async def create_batch(self, input_data_list):
            return [v.tolist() for v in embedder.encode([str(t) for t in input_data_list])]

    class OurReranker(CrossEncoderClient):
        async def rank(self, query, passages):
            if not passages:
                return []
            if reranker is None:  # cosine between the query and each passage
                vecs = embedder.encode([query, *passages])
                scores = (vecs[1:] @ vecs[0]).tolist()
            else:
                scores = [float(s) for s in reranker.score(query, list(passages))]
            return sorted(zip(passages, scores), key=lambda p: -p[1])

    return OurEmbedder(), OurReranker()


async def group_records(cls: Any, driver: Any, group: str) -> list[Any]:
    """Every node / edge of ``cls`` in ``group`` (Graphiti raises when there are none)."""
    from graphiti_core.errors import GroupsEdgesNotFoundError, GroupsNodesNotFoundError

    try:
        return list(await cls.get_by_group_ids(driver, [group]))
    except (GroupsEdgesNotFoundError, GroupsNodesNotFoundError):
        return []


async def kuzu_fulltext_indexes(driver: Any) -> None:
    """Create Graphiti's full-text indexes on Kuzu: in graphiti-core 0.31.2 ``build_indices_and_constraints``
    is a no-op for Kuzu, and its search then fails on the missing ``edge_name_and_fact`` index."""
    from graphiti_core.driver.driver import GraphProvider
    from graphiti_core.graph_queries import get_fulltext_indices

    for query in get_fulltext_indices(GraphProvider.KUZU):
        try:
            await driver.execute_query(query)
        except Exception as exc:  # noqa: BLE001 - already there (a resumed run)
            log.debug("kuzu index: %s", exc)
