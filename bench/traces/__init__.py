"""Real traffic: a request trace replayed as the steps a continuous-batching server runs, bucketed into a few
representative serving batches that every backend times (`bench run --workload`).

requests: the trace's formats and the named workloads; flashinfer: flashinfer-trace workload lines as steps;
schedule: requests -> steps; buckets: steps -> weighted representative batches and the error that adds in counted
work; sample: a seeded, stratified sample of real steps, timed exactly, that checks the buckets' estimate in time;
replay: all of it in one pass, as the plain data a results file keeps. The report's trace section:
bench.analysis.time_to_serve.
"""
