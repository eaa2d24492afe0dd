"""The parametrized benchmark: one test per case of the sweep (see bench.suite.plugin)."""


def test_attention(benchmark, attn_case, attn_session):
    attn_session.measure(attn_case, benchmark)
