"""The analysis: one run's results as numbers and verdicts, rendering nothing; below the claims, which judge with it,
and the report, which renders what it finds.

load reads results files into the tidy frame (one row per case); frames picks rows and pairs twins; interval gives a
ratio's 95% interval from its cases' own CIs; conditions and verdict are what a claim returns (a condition's word
against its bound, the claim's word over them); decided re-judges a condition on the interleaved blocks a run spent on
it; claim_rows lays verdicts out as claims.csv's rows. The rest are the analyses claims and figures share: traits
(the registry's groups of backends), rivals, layer_share, variant_cost, serving, sparse_line and sparse_cost,
time_to_serve (replayed traces), suspects. What imports pandas is imported where it is used by the claims (inside a
judge): planning a run reads the claims' questions and needs none of it.
"""
