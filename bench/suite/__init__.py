"""The benchmark engine: sweeps -> cases -> pytest-benchmark tests -> one results file per run."""
