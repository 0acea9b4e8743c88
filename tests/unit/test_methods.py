"""Methods are found by name in ``conf/method/``: every shipped one resolves to its class, an unknown name is refused
with the list of known ones, a broken YAML is named, and the interface module loads no stage and no Hydra."""

from __future__ import annotations

import subprocess
import sys

import pytest

from mnemis.app.methods import METHOD_DIR, MethodError, build_needs, check_methods, known_methods, make_methods
from mnemis.method import EPISODE_VECTORS, GRAPH, Method, MethodContexts
from mnemis.types import RetrievedContext
from tests.helpers.eval import make_question

SHIPPED = {"mnemis": "mnemis.memory_method.MnemisMethod", "rag": "mnemis.baselines.rag.RagMethod",
           "full_context": "mnemis.baselines.full_context.FullContextMethod",
           "mem0": "mnemis.baselines.mem0.method.Mem0Method", "mem0g": "mnemis.baselines.mem0.method.Mem0Method",
           "graphiti": "mnemis.baselines.peers.method.PeerMethod",
           "mem0_oss": "mnemis.baselines.peers.method.PeerMethod"}


def _qualname(obj: object) -> str:
    return f"{type(obj).__module__}.{type(obj).__name__}"


def test_the_known_methods_are_the_yaml_files_of_conf_method():
    assert known_methods() == sorted(p.stem for p in METHOD_DIR.glob("*.yaml"))
    assert set(SHIPPED) <= set(known_methods())


@pytest.mark.parametrize("name", known_methods())
def test_every_shipped_method_resolves_to_a_method_of_its_name(name):
    (method,) = make_methods([name])
    assert isinstance(method, Method) and method.name == name
    if name in SHIPPED:
        assert _qualname(method) == SHIPPED[name]


def test_methods_come_back_in_the_order_named():
    assert [m.name for m in make_methods(["rag", "mnemis", "full_context"])] == ["rag", "mnemis", "full_context"]


def test_an_unknown_name_is_refused_with_the_known_ones():
    with pytest.raises(MethodError) as err:
        make_methods(["mnemis", "telepathy", "rag"])
    msg = str(err.value)
    assert msg.startswith("unknown method 'telepathy'; choose one or more of " + str(known_methods()))
    with pytest.raises(MethodError, match="no method named"):
        check_methods([])


def test_the_cli_refuses_an_unknown_method_before_reading_the_rest(tmp_path):
    from mnemis.app.jobs import run_command
    from mnemis.config import compose

    cfg = compose(["experiment=quickstart", "methods=[mnemis,telepathy]", f"paths.artifacts_dir={tmp_path}/a"])
    with pytest.raises(SystemExit) as err:
        run_command(cfg, tmp_path / "run")
    assert "telepathy" in str(err.value) and all(name in str(err.value) for name in SHIPPED)


@pytest.mark.parametrize(("text", "expected"), [
    ("m: 3\n", "needs `_target_: <its class>`"),
    ("_target_: mnemis.baselines.rag.RagMethod\nname: other\n", "`name` is not a key here"),
    ("_target_: mnemis.baselines.rag.NoSuchMethod\n", "cannot import 'mnemis.baselines.rag.NoSuchMethod'"),
    ("_target_: mnemis.baselines.rag.RagMethod\nk: 3\n", ".k: unknown key for mnemis.baselines.rag.RagMethod"),
    ("_target_: mnemis.types.Hit\n", "mnemis.types.Hit is not a mnemis.method.Method"),
    ("_target_: mnemis.render.render_episodes\n", "mnemis.render.render_episodes is not a mnemis.method.Method"),
])
def test_a_broken_method_yaml_is_named(tmp_path, text, expected):
    (tmp_path / "broken.yaml").write_text(text)
    with pytest.raises(MethodError) as err:
        make_methods(["broken"], tmp_path)
    assert expected in str(err.value) and str(tmp_path / "broken") in str(err.value)


class Echo(Method):
    """A method with a constructor argument of its own (for the test below)."""

    def __init__(self, name: str, text: str) -> None:
        super().__init__(name)
        self.text = text

    def contexts(self, questions):
        return MethodContexts([self.text] * len(questions))


class DenseEcho(Method):
    """A method whose contexts would need the episodes' vectors."""

    builds = frozenset({EPISODE_VECTORS})

    def contexts(self, questions):
        return MethodContexts(["x"] * len(questions))


def test_the_shared_build_makes_what_the_methods_classes_say_they_need(tmp_path):
    assert build_needs(["mnemis"]) == {EPISODE_VECTORS, GRAPH}
    assert build_needs(["rag"]) == {EPISODE_VECTORS}
    assert build_needs(["full_context", "bm25_rag", "mem0", "mem0g", "graphiti"]) == frozenset()
    assert build_needs(["rag", "full_context"]) == {EPISODE_VECTORS}
    # a new method says what it needs in its class; the job reads it there (no list of method names to extend)
    (tmp_path / "dense_echo.yaml").write_text(f"_target_: {__name__}.DenseEcho\n")
    assert build_needs(["dense_echo"], tmp_path) == {EPISODE_VECTORS}
    with pytest.raises(MethodError, match="unknown|no method"):
        build_needs(["nope"], tmp_path)


def test_a_yaml_passes_its_other_keys_to_the_constructor(tmp_path):
    (tmp_path / "echo.yaml").write_text(f"_target_: {__name__}.Echo\ntext: hello\n")
    (method,) = make_methods(["echo"], tmp_path)
    assert isinstance(method, Echo) and (method.name, method.text) == ("echo", "hello")
    (tmp_path / "mute.yaml").write_text(f"_target_: {__name__}.Echo\n")
    with pytest.raises(MethodError, match=r"mute.yaml: missing a required argument: 'text' of tests.unit.test_"):
        check_methods(["mute"], tmp_path)


def test_a_peer_method_must_be_one_of_the_peers(tmp_path):
    (tmp_path / "letta.yaml").write_text("_target_: mnemis.baselines.peers.method.PeerMethod\n")
    with pytest.raises(ValueError, match=r"peer method 'letta': the peers are \['graphiti', 'mem0_oss'\]"):
        make_methods(["letta"], tmp_path)


def test_contexts_need_prepare_first():
    (method,) = make_methods(["rag"])
    with pytest.raises(RuntimeError, match=r"method 'rag': prepare\(run\) must come before contexts"):
        method.contexts([])


def test_a_record_of_the_wrong_length_is_refused():
    qs = [make_question(i, "g") for i in range(2)]
    MethodContexts(["a", "b"]).check("m", qs)
    ctx = RetrievedContext(question_id="q0", group_id="g")
    with pytest.raises(ValueError, match=r"method 'm': texts has 1, recall_routes\[m/x\] has 1 entries for 2"):
        MethodContexts(["a"], None, {"m/x": [ctx]}).check("m", qs)


def test_the_interface_loads_no_stage_and_no_hydra():
    code = ("import sys, mnemis.method; print(sorted(m for m in sys.modules "
            "if m.startswith(('hydra', 'omegaconf', 'mnemis'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['mnemis', 'mnemis.method', 'mnemis.types']"
