"""The backend registry's traits, as the report's groups of backends: no other module in bench.report names one.

Every group is derived from bench.backends, so a new backend falls into its groups by its traits alone.
"""

from __future__ import annotations

from bench.analysis.sparse_line import executes_sparsely
from bench.backends import BACKENDS
from bench.backends.base import PAGED_LAYOUTS
from bench.problem.scores import OPT_IN_VARIANTS

# An automatic chooser (torch SDPA) -> the forced kernels it picks among, as the registry lists them (its `chooses`):
# the report's and the planner's (bench.claims.question)
AUTOMATIC: dict[str, tuple[str, ...]] = {name: b.chooses for name, b in BACKENDS.items() if b.chooses}

# materialising: builds the Sq x Skv score matrix, and expands K/V to all Hq heads before its products (repeat);
# tiled (flash-style): O(S) memory, and a fused kernel that reads each KV head once for its whole group
MATERIALISING: tuple[str, ...] = tuple(name for name, b in BACKENDS.items() if b.memory == "materialising")
FLASH_STYLE: tuple[str, ...] = tuple(name for name, b in BACKENDS.items() if b.memory == "tiled")
# The baseline of every speedup: the registry's first materialising backend, the textbook implementation.
BASELINE: str = MATERIALISING[0]
# A wrapper (transformers' attention paths) -> the registry backends it could have called directly: the one it
# wraps and the kernels that one chooses among.
WRAPPED: dict[str, tuple[str, ...]] = {name: (b.wraps, *BACKENDS[b.wraps].chooses) for name, b in BACKENDS.items()
                                       if b.wraps}
# Backends with a real paged kernel: their paged layout reads the pages in place (not "paged-gather").
PAGED_KERNELS: tuple[str, ...] = tuple(name for name, b in BACKENDS.items()
                                       if b.layout(PAGED_LAYOUTS) not in (None, "paged-gather"))

# Fused (tiled) kernels that run every attention variant (their `variants` trait lists them all): the variant claim's
ALL_VARIANT_KERNELS: tuple[str, ...] = tuple(name for name, b in BACKENDS.items()
                                             if b.memory == "tiled" and set(OPT_IN_VARIANTS) <= set(b.variants))

# Kernels that execute a sparsity sparsely (a BlockMask's kept blocks, K gathered keys per query): the speedup claim's;
# the others take a keep-set as a boolean mask and compute every pair (bench.analysis.sparse_line defines which)
SPARSE_KERNELS: tuple[str, ...] = tuple(name for name in BACKENDS if executes_sparsely(name))

# Kernel families for claims that depend on how a kernel treats grouped K/V heads.
EXPANDING, FUSED = "expanding", "fused"
FAMILY_NAMES: dict[str, str] = {EXPANDING: "kernels that expand K/V to Hq heads", FUSED: "fused kernels"}


def kv_family(backend: str) -> str | None:
    """EXPANDING or FUSED by the backend's memory trait; None for a name the registry does not know."""
    if backend in MATERIALISING:
        return EXPANDING
    return FUSED if backend in FLASH_STYLE else None
