"""The parametrized benchmark: one test per case of the sweep (bench.suite.plugin parametrizes `case`)."""


def test_attention(benchmark, case, attn_session):
    attn_session.measure(case, benchmark)
