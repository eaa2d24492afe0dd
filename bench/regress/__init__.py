"""Regression checks: the noise model (noise), the verdicts of two runs (compare) and their rendering (render),
per-machine baselines (baseline), interleaved A/B of two revisions (ab/) and a metric across commits (history)."""
