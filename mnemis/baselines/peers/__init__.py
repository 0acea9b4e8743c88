"""The peer libraries themselves as methods in the same harness: ``graphiti`` (graphiti-core on an embedded Kuzu
database) and ``mem0_oss`` (mem0ai's ``Memory`` on FAISS).

Both get the same local model through an OpenAI-compatible endpoint (``peers.base_url``, or a vLLM server the
harness starts on the configured model), our embedder (and, for Graphiti's cross-encoder, our reranker) wrapped in
their interfaces, and hand back one rendered context per question; answering and judging stay ours, so only the
memory differs. A library failure (a reply its parser rejects, a crash) is counted per episode or question and
never stops the run. Install them with ``pip install -e ".[peers]"``.
"""

from __future__ import annotations

from mnemis.baselines.peers.common import PEER_METHODS, PeerRun, run_peer

__all__ = ["PEER_METHODS", "PeerRun", "run_peer"]
