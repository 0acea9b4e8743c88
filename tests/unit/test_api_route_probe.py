"""The paper's API route against a stub keeping GPT-4.1-mini's limits and a 32K served model's
(experiments/bench/api_route_probe.py): no request asks for more than the model allows, none loses its schema."""

from __future__ import annotations

from tests.helpers.bench import load_bench

probe = load_bench("api_route_probe")


def test_the_stub_refuses_in_each_apis_words_and_fills_lists():
    gpt = probe.LimitStub(probe.PROFILES["gpt-4.1-mini"])
    assert gpt.refusal(32_768, 1_000) is None and "at most 32768 completion tokens" in gpt.refusal(32_769, 10)
    assert "maximum context length is 1047576" in gpt.refusal(30_000, 1_030_000)
    vllm = probe.LimitStub(probe.PROFILES["served-32k"])
    assert "cannot be greater than max_model_len=32768" in vllm.refusal(40_000, 10)
    assert "(31000 > 32768 - 2000)" in vllm.refusal(31_000, 2_000) and vllm.refusal(30_000, 2_000) is None
    schema = {"type": "object", "properties": {"names": {"type": "array", "maxItems": 40,
                                                         "items": {"type": "string", "maxLength": 5}}}}
    names = probe.Filler().value(schema, schema)["names"]
    assert len(names) == probe.FILL and len(set(names)) == probe.FILL


def test_paper_run_on_the_api_route_stays_within_the_limits(tmp_path, locomo_path):
    out = probe.main(["--work", str(tmp_path), "--locomo-dir", str(locomo_path.parent),
                      "dataset.slice.max_questions=2", "judge.leniency.enabled=false"])
    for name, p in out["after"]["profiles"].items():
        assert p["exit_code"] == 0, (name, p.get("stderr_tail"))
        assert p["requests"] > 100 and p["rejected"] == 0 and p["downgraded"] == 0, (name, p["first_rejections"])
        limit = p["profile"]["cap"] or p["profile"]["window"]
        assert p["largest_max_tokens_asked"] <= limit
        ledger = p["ledger"]
        assert ledger["clamped"].get("extract_facts", 0) > 0  # paper mode's worst case is above the limits there
        assert not ledger["over_limit"] and not ledger["unconstrained"] and not ledger["failures"]
        assert not [w for w in p["health_warnings"] if "clamped" in w or "JSON schema" in w or "refused" in w]
