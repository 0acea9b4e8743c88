"""Scale-out: merge the run dirs of a sharded run (the shard rule itself is :mod:`mnemis.data.shard`), a sharded
job's node-local state, and the GPU slots of a local sweep."""
