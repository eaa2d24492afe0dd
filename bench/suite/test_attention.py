"""The parametrized benchmark: one test per case of the sweep (bench.suite.plugin parametrizes `case`)."""

from bench.suite.plugin import measure


def test_attention(benchmark, case, attn_session):
    measure(attn_session, case, benchmark)
