"""Shared-prefix batches and cascade attention: B requests whose contexts begin with the same P tokens (the shape's
`prefix`, bench.problem.prefix), attended plain (each request over its whole context, the prefix's K/V copied into
every request's cache and read B times) or by cascade (the prefix attended once by all the batch's queries together,
each suffix apart, the two merged per query row and head by their log-sum-exps).

  counts   the record's formulas: FLOPs (plain attention's, for both methods), each method's bytes (no torch);
  cascade  the inputs of a case, the two methods' calls, the cascade's parts and its merge (torch).
"""
