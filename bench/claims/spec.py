"""What a claim says, in words the planner, the report, `--plan` and the reference share: one frozen ClaimSpec.

A spec names its judge as "module:function" (a function `(frame, run) -> bench.analysis.verdict.Verdict`, in the
claim's own module) so that reading a spec imports no pandas, and the planner's question that funds its cases by key
(None: no case of a sweep answers it). `measure` is the `bench run` command that measures it on its own: a plan
without the question's cases names it, and so does a verdict that is not measured. `ratio` says what its conditions'
ratio is, in the report's words (the column that holds it, the sentence its answer is), and `figures` names the
report's figures (bench.report.catalogue) that show it, drawn beside its section.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class ClaimSpec:
    key: str
    text: str  # the claim, as the report prints it
    judge: str  # "module:function", a function (frame, run) -> bench.analysis.verdict.Verdict
    question: str | None  # the planner's question that funds its cases; None: no case of a sweep answers it
    measure: dict[str, str] = field(default_factory=dict)  # `bench run`'s options (flag -> value) that measure it
    ratio: str = "ratio"  # what a condition's ratio is: "MHA step / GQA-MQA step"
    figures: tuple[str, ...] = ()  # the report's figures that show it, by catalogue name

    @property
    def command(self) -> str:
        """The command that measures it on its own."""
        return self.command_with()

    def command_with(self, **flags: str) -> str:
        """The command with some options changed or added (`seq="4096,8192"` sets --seq)."""
        options = {**self.measure, **{k.replace("_", "-"): v for k, v in flags.items()}}
        return " ".join(["python -m bench run", *(f"--{k} {v}" for k, v in options.items())])


# the options of a plain causal fp32 prefill, which several claims' commands share
PREFILL: dict[str, str] = {"dtype": "fp32", "mask": "causal", "phase": "prefill"}
