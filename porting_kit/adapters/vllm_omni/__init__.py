"""vLLM-Omni 0.30.0, the first serving framework: its config-layer schema
(:mod:`.schema`), its AR-runner calling contract (:mod:`.engine`) and edits to its
registries (:mod:`.registry`)."""
