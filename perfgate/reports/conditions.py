"""What the workers measured under, in one line for the reports (report.html, summary.md): the C allocator,
address-space randomization and the memory layout policy. Each changes what is measured (the steady allocator
moved a conv rollout's step 1.95x against glibc's defaults, docs/gate.md), so a reader of the numbers is told.
The allocator is taken from what each worker reported it found (``layout.malloc`` per process), not from
what the orchestrator asked for; results from before that record fall back to the run's environment.
"""

from __future__ import annotations

import re
from collections import Counter

from perfgate.model.results import RunResult

# a preloaded library's name comes from results.json (untrusted): shown only when it is a plain file name
_LIBRARY = re.compile(r"[\w.+-]{1,80}")

ALLOCATOR_WORDS = {
    "steady": "steady C allocator (glibc's mmap and trim thresholds fixed; PERFGATE_MALLOC=system for its defaults)",
    "system": "glibc's default allocator (PERFGATE_MALLOC=system)",
    "unavailable": "the C library's own allocator (not glibc: nothing set)",
    "preloaded": "a preloaded allocator{library}, as configured (nothing set)",
}
ASLR_WORDS = {"fixed": "ASLR off", "random": "ASLR on"}
LAYOUT_WORDS = {
    "drawn": "a memory layout drawn per process{seed}",
    "fixed": "one heap offset per process index",
    "random": "layouts left to the kernel",
}


def _allocator(run: RunResult) -> str | None:
    held: Counter[str] = Counter()
    libraries: set[str] = set()
    user: set[str] = set()
    for case in run.cases:
        for p in case.processes:
            record = p.layout if isinstance(p.layout, dict) else {}
            state = record.get("malloc")
            if isinstance(state, str) and state in ALLOCATOR_WORDS:
                held[state] += 1
                name = str(record.get("malloc_library", "")).rsplit("/", 1)[-1]
                if _LIBRARY.fullmatch(name):
                    libraries.add(name)
                kept = record.get("malloc_user")
                if isinstance(kept, dict):
                    user.update(str(k) for k in kept if str(k) in ("mmap_threshold", "trim_threshold"))
    if not held:
        state = run.environment.get("malloc")
        return ALLOCATOR_WORDS[state].format(library="") if state in ALLOCATOR_WORDS else None
    total = sum(held.values())
    parts = []
    for state, n in held.most_common():
        words = ALLOCATOR_WORDS[state].format(library=f" ({', '.join(sorted(libraries))})" if libraries else "")
        parts.append(words if len(held) == 1 else f"{words} in {n} of {total} processes")
    if user:
        parts.append(f"the user's own {' and '.join(sorted(user)).replace('_', ' ')} kept")
    return "; ".join(parts)


def measured_under(run: RunResult) -> str | None:
    """One sentence: the allocator, ASLR and layout policy the workers measured under; None when the run
    recorded none of them (results from an older perfgate)."""
    env = run.environment
    seed = env.get("layout_seed")
    parts = [
        _allocator(run),
        ASLR_WORDS.get(str(env.get("address_layout"))),
        LAYOUT_WORDS[env["layout_policy"]].format(seed=f" (seed {seed})" if isinstance(seed, int) else "")
        if env.get("layout_policy") in LAYOUT_WORDS else None,
    ]
    shown = [p for p in parts if p]
    return f"Workers measured with {', '.join(shown)}." if shown else None
