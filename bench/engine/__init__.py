"""The engine: a sweep (sweeps) checked into a plan (options), run case by case (runner) by one session (session)
into a results store, with a shared queue (queue) for worker processes. Both front ends — `bench run` and the
pytest plugin (bench.suite) — drive the same session."""
