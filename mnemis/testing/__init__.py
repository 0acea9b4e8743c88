"""Support for the tests and benchmarks, shipped with the package so both import it normally: a scripted model
that answers every stage (``responder``, ``hierarchy_rules``), synthetic datasets and the runs built on them
(``synth``, ``beam_synth``, ``runner``, ``toy_memory``), the reply-budget map (``budgets``), the ingest cost
report (``ingest_cost``), a headless browser for the explorer (``headless``) and the run-directory readers the
benchmarks share (``bench_runs``). The library never imports this package."""
