"""Mem0 and Mem0g as methods of a run (``conf/method/mem0.yaml``, ``conf/method/mem0g.yaml``)."""

from __future__ import annotations

from collections.abc import Sequence

from mnemis.address import build_view, config_hash, values
from mnemis.baselines.mem0.pipeline import run_mem0
from mnemis.method import Method, MethodContexts, json_file
from mnemis.settings import Mem0Settings
from mnemis.types import Question


class Mem0Method(Method):
    """Mem0 (``mem0``) or Mem0g (``mem0g``): :func:`~mnemis.baselines.mem0.pipeline.run_mem0` with the settings
    section of the method's name (``mem0.*`` / ``mem0g.*``, from ``conf/mem0/``).

    Its memory lives in ``<memory_dir>/<name>-<hash>``, addressed by its settings and the Mem0 prompts' fingerprints,
    and is built or resumed by the same call that searches it; its counters go to ``<name>_stats.json``.
    """

    def section(self) -> Mem0Settings:
        """This method's settings section of the run (``mem0`` or ``mem0g``)."""
        section = getattr(self.run.settings, self.name, None)
        if not isinstance(section, Mem0Settings):
            raise ValueError(f"method {self.name!r}: the run's settings have no `{self.name}` section "
                             "(a Mem0 method reads the section of its own name: mem0 or mem0g)")
        return section

    def contexts(self, questions: Sequence[Question]) -> MethodContexts:
        run, section = self.run, self.section()
        view = build_view({self.name: values(section)}, [self.name], prompts="mem0")  # its settings and prompts
        work = run.memory_dir / f"{self.name}-{config_hash(view, sorted(view))}"
        data = run.data.model_copy(update={"questions": list(questions)})
        out = run_mem0(data, run.models.llm, run.models.embedder, section, work)
        return MethodContexts(out.contexts, out.retrieved, files={f"{self.name}_stats.json": json_file(out.stats)})
