"""Support for the tests and benchmarks, shipped with the package so both import it normally: a scripted model
that answers every stage (``responder``, ``hierarchy_rules``), synthetic datasets and the runs built on them
(``synth``, ``beam_synth``, ``runner``, ``toy_memory``), the reply-budget map (``budgets``), the ingest cost
report (``ingest_cost``), a headless browser for the explorer (``headless``), and what the benchmarks share: the
summary of a finished run dir (``bench_runs``), running and replaying a benchmark's runs (``bench_replay``),
System-1 alone over a store (``system1_runs``) and the GPU rates behind the GPU-hour estimates (``gpu_rates``).
Nothing else in the package imports it."""
