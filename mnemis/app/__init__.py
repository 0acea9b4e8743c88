"""The command-line application: ``mnemis <command>`` (:mod:`mnemis.app.cli`), its jobs (build, eval, run,
report: :mod:`mnemis.app.jobs`), the pre-flight checks (:mod:`mnemis.app.doctor`), run provenance and the
comparison of run directories. The library (``from mnemis import Memory``) never imports this package; this is
the only package that imports Hydra (with :mod:`mnemis.config`, which composes the config tree)."""
