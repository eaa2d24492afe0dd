"""A speculative-decoding draft (`Draft`): the N tokens a target model verifies in one attention call over its KV
cache, as a tree of parent indices. Nothing here imports torch: plans read it.

The tree: `parents[i]` is the index of draft token i's parent among the draft, or -1 for a root (a child of the last
accepted token, whose K/V is already the cache's last); a parent comes before its child, so a chain is
(-1, 0, 1, ..., N - 2). A draft may have several roots (Medusa's and EAGLE's trees branch at the first token).
Visibility, the rule every backend's mask and the float64 reference follow: draft token i sees every cached key and
the draft tokens on its path to a root, itself included; never a sibling or a sibling's subtree. In the call the
draft's own K/V follow the cache (seq_kv = cache + N keys, seq_q = N queries, bottom-right aligned as
bench.problem.masks aligns them), so the visibility lies inside the causal mask, which a chain fills exactly.
Token i's position in the sequence is cache + depth(i) - 1 (rotary positions follow the depth); the keys a kernel is
handed are already rotated, so only the mask tells a tree from a chain.

What --draft takes (`Draft.parse`):
  chain:N          N tokens in a line: the draft of EAGLE/MTP-style chain drafting (DeepSeek-V3's one MTP module
                   verifies chain:1)
  tree:C1,C2,...   C1 roots, each with C2 children, each of those with C3, ...: sum over depths of C1 x ... x Cd tokens
  a preset         the trees serving engines run by default (PRESETS, each with where its sizes come from)
  parents:r.0.0.1  the parent list itself (r: a root), the label a file's tree is recorded under
  PATH             a file of parent indices: a JSON object {"parents": [...]} or the indices separated by spaces or
                   commas, -1 marking a root
A preset is written from its published sizes, tokens per depth; its nodes of one depth hang from the previous depth's
in turn, the first (most likely) parent first, which is how a top-k expansion fills a tree's first branches.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from bench.errors import InputError, positive_int

# name -> (tokens per depth, where the sizes come from)
PRESETS: dict[str, tuple[tuple[int, ...], str]] = {
    "eagle": ((4, 8, 8, 3, 2), "EAGLE-1's default static tree (mc_sim_7b_63; Li et al. 2024, "
                               "github.com/SafeAILab/EAGLE): 25 tokens over 5 depths"),
    "eagle2": ((10, 20, 15, 10, 5), "EAGLE-2's default dynamic tree size (total_token 60, depth 5, top_k 10; "
                                    "github.com/SafeAILab/EAGLE): it picks its tree per step, so this is one tree "
                                    "of that size, at most top_k children per token"),
    "medusa": ((10, 28, 23, 2), "Medusa's default tree (mc_sim_7b_63; Cai et al. 2024, "
                                "github.com/FasterDecoding/Medusa): 63 tokens over 4 depths"),
    "sglang": ((4, 1, 1, 1, 1), "SGLang's default EAGLE draft for a Llama target when none is set "
                                "(speculative_num_steps 5, eagle_topk 4, num_draft_tokens 8; "
                                "docs.sglang.ai, speculative decoding)"),
}


class DraftError(InputError):
    """A draft that cannot be a tree (a cycle, a parent out of range or after its child), or unknown text."""


@dataclass(frozen=True)
class Draft:
    """A draft tree: its parent list and the label it is recorded under (the text `parse` reads back)."""

    parents: tuple[int, ...]
    label: str

    def __post_init__(self) -> None:
        check_parents(self.parents, f"draft {self.label!r}")

    @classmethod
    def parse(cls, text: str) -> Draft:
        """chain:N, tree:C1,C2,..., a preset's name, parents:r.0.0.1, or a file's path (module docstring)."""
        spec = text.strip()
        kind, colon, rest = spec.partition(":")
        if spec in PRESETS:
            return cls(by_depth(PRESETS[spec][0]), spec)
        if colon and kind == "chain":
            n = _count(rest, spec, "its length")
            return chain(n)
        if colon and kind == "tree":
            fan = tuple(_count(part, spec, "a fan-out") for part in rest.split(","))
            return cls(branching(fan), f"tree:{','.join(map(str, fan))}")
        if colon and kind == "parents":
            parents = tuple(-1 if part == "r" else _index(part, spec) for part in rest.split("."))
            return labelled(parents)
        path = Path(spec)
        if path.is_file():
            return labelled(read_parents(path))
        raise DraftError(f"unknown draft {text!r}; expected chain:N, tree:C1,C2,..., parents:r.0.0.1, a file of "
                         f"parent indices, or a preset ({', '.join(PRESETS)})")

    @property
    def n(self) -> int:
        """Draft tokens: the call's queries."""
        return len(self.parents)

    @property
    def depths(self) -> tuple[int, ...]:
        """Each token's depth, a root's 1."""
        out: list[int] = []
        for parent in self.parents:
            out.append(1 if parent < 0 else out[parent] + 1)
        return tuple(out)

    @property
    def is_chain(self) -> bool:
        return self.parents == tuple(range(-1, self.n - 1))

    def path(self, i: int) -> list[int]:
        """The draft tokens token i sees: itself and its ancestors, walked up the parent list."""
        seen = [i]
        while self.parents[seen[-1]] >= 0:
            seen.append(self.parents[seen[-1]])
        return seen

    def pairs(self, cache: int) -> int:
        """(query, key) pairs the tree leaves per sequence and head: every token sees the cache and its path."""
        return self.n * cache + sum(self.depths)


def chain(n: int) -> Draft:
    return Draft(tuple(range(-1, n - 1)), f"chain:{n}")


def labelled(parents: tuple[int, ...]) -> Draft:
    """A parent list under its label: chain:N where it is a chain, else parents:r.0.0.1."""
    check_parents(parents, "the draft's parent list")
    if parents == tuple(range(-1, len(parents) - 1)):
        return chain(len(parents))
    return Draft(parents, "parents:" + ".".join("r" if p < 0 else str(p) for p in parents))


def branching(fan: tuple[int, ...]) -> tuple[int, ...]:
    """tree:C1,C2,...'s parent list: depth by depth, each token of the last depth given C_d children in turn."""
    parents: list[int] = []
    last = [-1]
    for width in fan:
        level = []
        for parent in last:
            level += [len(parents) + k for k in range(width)]
            parents += [parent] * width
        last = level
    return tuple(parents)


def by_depth(counts: tuple[int, ...]) -> tuple[int, ...]:
    """A preset's parent list from its tokens per depth: each depth's tokens hang from the previous depth's in turn,
    the first parent first (a top-k expansion fills the likeliest branches first)."""
    parents: list[int] = []
    last = [-1]
    for count in counts:
        start = len(parents)
        parents += [last[k % len(last)] for k in range(count)]
        last = list(range(start, start + count))
    return tuple(parents)


def read_parents(path: Path) -> tuple[int, ...]:
    """A file's parent indices: a JSON object {"parents": [...]}, or integers separated by spaces or commas."""
    text = path.read_text()
    try:
        if text.lstrip().startswith("{"):
            values = json.loads(text)["parents"]
            if not isinstance(values, list) or not all(isinstance(v, int) and not isinstance(v, bool)
                                                       for v in values):
                raise DraftError(f"draft file {path}: 'parents' must be a list of integers")
            return tuple(values)
        return tuple(int(word) for word in text.replace(",", " ").split())
    except (ValueError, KeyError, TypeError) as err:
        raise DraftError(f"draft file {path}: expected {{\"parents\": [...]}} or parent indices separated by "
                         f"spaces ({type(err).__name__}: {err})") from None


def check_parents(parents: tuple[int, ...], what: str) -> None:
    """DraftError naming the first node that breaks a rule: a parent out of range, a node its own parent, a cycle,
    or a parent after its child."""
    n = len(parents)
    if n == 0:
        raise DraftError(f"{what}: no draft tokens")
    for i, p in enumerate(parents):
        if p == i:
            raise DraftError(f"{what}: node {i} is its own parent")
        if not -1 <= p < n:
            raise DraftError(f"{what}: node {i}'s parent {p} is out of range (-1 for a root, else 0..{n - 1})")
    for i in range(n):
        seen = [i]
        while parents[seen[-1]] >= 0:
            nxt = parents[seen[-1]]
            if nxt in seen:
                loop = seen[seen.index(nxt):] + [nxt]
                raise DraftError(f"{what}: nodes {' -> '.join(map(str, loop))} form a cycle")
            seen.append(nxt)
    for i, p in enumerate(parents):
        if p > i:
            raise DraftError(f"{what}: node {i}'s parent {p} comes after it (a parent comes before its child)")


def _count(text: str, spec: str, what: str) -> int:
    return positive_int(text, what, f"draft {spec!r}", DraftError)


def _index(text: str, spec: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise DraftError(f"draft {spec!r}: parent {text!r} is neither an index nor r (a root)") from None


def draft_words(text: str) -> tuple[str, ...]:
    """--draft's values, split at commas where a number does not continue a tree's fan-outs
    (tree:4,2,2,1,chain:8 -> tree:4,2,2,1 and chain:8)."""
    out: list[str] = []
    for word in (w.strip() for w in text.split(",")):
        if word.isdigit() and out and out[-1].startswith("tree:"):
            out[-1] += "," + word
        elif word:
            out.append(word)
    return tuple(out)
