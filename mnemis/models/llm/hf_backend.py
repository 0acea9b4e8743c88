"""transformers backend: batched ``generate`` with left padding, constrained by xgrammar.

Requests are grouped by sampling parameters and whether they carry a schema; each group is split
into batches of ``batch_size`` and generated together with one xgrammar grammar per row. Slower than
vLLM, but needs nothing beyond transformers; ``smollm2-135m`` is the PyPI GGUF dequantised once to a folder.
"""

from __future__ import annotations

import json
import logging
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from mnemis.models.llm.base import Completion, LLMRequest
from mnemis.models.llm.limits import ModelLimits
from mnemis.models.packaged import packaged_model
from mnemis.models.split_gguf import SPLIT_MODELS
from mnemis.models.tiny import SMOLLM2, model_identity, require_path, resolve_local

log = logging.getLogger(__name__)


class HFBackend:
    """Chat generation with ``transformers`` (+ ``xgrammar`` logits processor for schemas).

    Args:
        model: HF id, local folder, ``smollm2-135m`` or a split PyPI GGUF (``qwen2.5-coder-1.5b``, ...).
        gguf_file: GGUF file name inside ``model`` (set automatically for ``smollm2-135m``).
        device: "auto", "cpu", "cuda", ...
        dtype: "auto" (bf16 on CUDA, fp32 on CPU), "float32", "bfloat16", "float16".
        batch_size: rows per ``generate`` call.
        max_new_tokens_cap: the completion cap: upper bound on any request's ``max_tokens``.
        max_model_len: the window, prompt + reply (None: the model config's ``max_position_embeddings``).
        chat_template_kwargs: extra arguments to ``apply_chat_template`` (e.g. enable_thinking).
    """

    def __init__(self, model: str, *, gguf_file: str | None = None, device: str = "auto", dtype: str = "auto",
                 batch_size: int = 16, max_new_tokens_cap: int | None = None,
                 chat_template_kwargs: dict[str, Any] | None = None, max_model_len: int | None = None) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from mnemis.models.embed import pick_device, pick_dtype

        if model == SMOLLM2 or model in SPLIT_MODELS:
            # the dequantised folder, made once (loading the GGUF itself parses its vocabulary three times,
            # about 40 s on 2 cores; see mnemis.models.packaged)
            folder, self.model_id = packaged_model(model)
            path = str(folder)
        else:
            require_path(model, "HF model")
            path = model
            self.model_id = ""
        self.device = pick_device(device)
        extra = {"gguf_file": gguf_file} if gguf_file else {}
        self.tokenizer = AutoTokenizer.from_pretrained(path, padding_side="left", **extra)
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.model = AutoModelForCausalLM.from_pretrained(path, dtype=pick_dtype(dtype, self.device), **extra)
        self.model.to(self.device).eval()
        if not self.model_id:  # after loading, so a freshly downloaded HF id resolves to its files
            local = resolve_local(model)
            self.model_id = model_identity(model, local) if local is not None else f"{model}@unresolved"
        if hasattr(self.model, "hf_quantizer"):
            self.model.hf_quantizer = None  # GGUF weights are dequantised on load
        self.batch_size = batch_size
        self.max_new_tokens_cap = max_new_tokens_cap
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self._compiler = None
        self._grammars: dict[str, Any] = {}
        window = max_model_len or getattr(self.model.config, "max_position_embeddings", None)
        self._limits = ModelLimits(max_new_tokens_cap, int(window) if window else None,
                                   "config" if max_model_len else "config and the model's positions",
                                   "the model's tokenizer")

    def limits(self) -> ModelLimits:
        """``max_new_tokens_cap`` and the window (``max_model_len`` or the model's positions)."""
        return self._limits

    def count_prompts(self, requests: Sequence[LLMRequest]) -> list[int]:
        """Prompt tokens with the chat template, as :meth:`_generate` encodes them."""
        return [len(self.tokenizer(self._prompt(r), add_special_tokens=False)["input_ids"]) for r in requests]

    def _grammar(self, schema: dict[str, Any]):
        import xgrammar as xgr

        if self._compiler is None:
            vocab = self.model.get_output_embeddings().weight.shape[0]
            info = xgr.TokenizerInfo.from_huggingface(self.tokenizer, vocab_size=vocab)
            self._compiler = xgr.GrammarCompiler(info)
        key = json.dumps(schema, sort_keys=True)
        if key not in self._grammars:
            self._grammars[key] = self._compiler.compile_json_schema(key, any_whitespace=False)
        return self._grammars[key]

    def _prompt(self, request: LLMRequest) -> str:
        return self.tokenizer.apply_chat_template(request.messages, tokenize=False, add_generation_prompt=True,
                                                  **self.chat_template_kwargs)

    def _generate(self, requests: list[LLMRequest]) -> list[Completion]:
        import torch
        import xgrammar as xgr

        s = requests[0].sampling
        max_new = min(s.max_tokens, self.max_new_tokens_cap or s.max_tokens)
        enc = self.tokenizer([self._prompt(r) for r in requests], return_tensors="pt", padding=True,
                             add_special_tokens=False).to(self.device)
        kwargs: dict[str, Any] = {"max_new_tokens": max_new, "pad_token_id": self.tokenizer.pad_token_id}
        if s.temperature > 0:
            kwargs.update(do_sample=True, temperature=s.temperature, top_p=s.top_p)
            torch.manual_seed(s.seed)
        else:
            kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        schemas = [r.json_schema() for r in requests]
        if schemas[0] is not None:
            grammars = [self._grammar(sc) for sc in schemas]
            kwargs["logits_processor"] = [xgr.contrib.hf.LogitsProcessor(grammars)]
        with torch.inference_mode():
            out = self.model.generate(**enc, **kwargs)
        new = out[:, enc["input_ids"].shape[1]:]
        stop = {self.tokenizer.eos_token_id, self.tokenizer.pad_token_id}
        results = []
        prompt_lens = enc["attention_mask"].sum(dim=1).tolist()
        for row, plen in zip(new.tolist(), prompt_lens):
            n = next((k for k, t in enumerate(row) if t in stop), len(row))
            text = self.tokenizer.decode(row[:n], skip_special_tokens=True)
            results.append(Completion(text=text, prompt_tokens=int(plen), completion_tokens=n,
                                      finish_reason="stop" if n < len(row) else "length"))
        return results

    def complete(self, requests: Sequence[LLMRequest]) -> list[Completion]:
        requests = list(requests)
        out: list[Completion | None] = [None] * len(requests)
        groups: dict[tuple, list[int]] = defaultdict(list)
        for i, r in enumerate(requests):
            groups[(r.sampling, r.schema_ is not None)].append(i)
        for idx in groups.values():
            # sort by prompt length so padding stays small
            idx = sorted(idx, key=lambda i: sum(len(m.get("content", "")) for m in requests[i].messages))
            for s in range(0, len(idx), self.batch_size):
                chunk = idx[s : s + self.batch_size]
                try:
                    comps = self._generate([requests[i] for i in chunk])
                except Exception as exc:  # noqa: BLE001 - a failing chunk fails only its items
                    log.warning("HF generate failed for %d items: %s", len(chunk), exc)
                    comps = [Completion(text="", error=f"{type(exc).__name__}: {exc}"[:1000]) for _ in chunk]
                for i, c in zip(chunk, comps):
                    out[i] = c
        return [c for c in out if c is not None]
