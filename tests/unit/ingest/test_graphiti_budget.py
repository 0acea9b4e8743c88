"""graphiti-core sends one fixed max_tokens with every request, past our LLM layer's per-request clamp: the builder
checks it once against the served model's limits (lowered to the completion cap, refused when it leaves less than
half the window)."""

from __future__ import annotations

import pytest

from mnemis.ingest.graphiti.builder import graphiti_budget
from mnemis.models.llm.limits import ModelLimits


class Backend:
    def __init__(self, limits: ModelLimits | None) -> None:
        self._limits = limits

    def limits(self) -> ModelLimits | None:
        return self._limits


def test_the_budget_is_lowered_to_the_completion_cap(caplog):
    limits = ModelLimits(max_completion_tokens=4096, max_model_len=1_047_576, source="config")
    assert graphiti_budget(8192, Backend(limits)) == 4096
    assert "completion cap" in caplog.text
    assert graphiti_budget(2048, Backend(limits)) == 2048


def test_a_budget_that_crowds_the_window_is_refused_with_its_numbers():
    with pytest.raises(ValueError, match=r"8,192 leaves graphiti-core's prompts 0 of the model's 8,192-token window"):
        graphiti_budget(8192, Backend(ModelLimits(max_model_len=8192, source="server")))
    assert graphiti_budget(4096, Backend(ModelLimits(max_model_len=8192, source="server"))) == 4096


def test_unknown_limits_leave_the_budget_alone():
    assert graphiti_budget(8192, Backend(None)) == 8192
    assert graphiti_budget(8192, Backend(ModelLimits())) == 8192
    assert graphiti_budget(8192, object()) == 8192
