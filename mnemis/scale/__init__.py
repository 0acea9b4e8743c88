"""Scale-out helpers (DESIGN §6): shard a dataset by group, merge shard runs, synthetic LME-S workloads."""
