"""Worker memory layouts, drawn on purpose: each worker process samples its own, recorded per process.

Where a process's code and data land in memory moves a small conv rollout's step time by up to 25%
between processes of identical code (docs/gate.md, "Why processes of the same code differ"). A layout
pinned once per run makes two runs differ as wholes, and then a folder name or a variable can decide a
verdict (Mytkowicz et al., ASPLOS 2009). So layout is treated as a random factor: every worker draws its
own from a seeded stream (Curtsinger and Berger's Stabilizer, ASPLOS 2013, randomises layouts so that
measurements sample them), and both sides of any comparison sample the same distribution of layouts.

What is held fixed (run-level parts that no draw could average out within a run): address-space
randomisation is off in workers (perfgate.running.workers) and the exec strings are padded to whole pages
(``padded_env``, below), so the stack, the interpreter and its libraries start at the same addresses in
every worker of every run; the case file and the fork server's request are padded to whole pages too
(``padded_json``). What is drawn, per process, before anything of the workload runs (perfgate.worker.main):

- ``heap_offset``: bytes taken from the C heap and kept, so the workload's heap allocations (under the
  steady allocator, below, every block up to 32 MiB) start elsewhere in the heap (16-byte steps over 64 KiB);
- ``mmap_pages``: pages of address space reserved and kept (with a fixed 64 MiB below them), so every
  later mapping (blocks past 32 MiB, the math libraries' JIT code, thread stacks) lands that many pages lower
  (0 to 511 pages: 2 MiB, past the set-index bits of the caches). Address space only: it counts against
  ``max_memory_mb`` (an address-space cap) by at most 66 MiB, and costs no memory.

What is set, per process, before anything of the workload runs (``steady_malloc``, below): the C
allocator's thresholds. glibc's malloc raises its mmap threshold the first time it frees a large mapped
block and gives the top of its heap back to the kernel past twice that; which of a workload's large
temporaries then come back as fresh zero pages every step depends on what the process allocated before
(its layout, its run folder's name). On the conv rollout of the layout issue that was the "performance
modes": processes of one build at 32, 54 or 63 ms a unit, 0, 12,000 or 18,000 page faults a unit
(docs/gate.md, "The performance modes were the C allocator's"). Fixed thresholds (``PERFGATE_MALLOC``:
``steady``, the default, or ``system``) make every process allocate alike.

``PERFGATE_LAYOUT`` picks the policy: ``drawn`` (default), ``fixed`` (the pre-2026-11-26 scheme: a heap
offset set by the process index, the same in every run) or ``random`` (the kernel's address-space
randomisation, nothing drawn) or ``none`` (address-space randomisation off and nothing drawn: no heap offset,
no reserved pages, no layout groups; what benchmarks/gate_ablation.py measures the draws against).
``PERFGATE_LAYOUT_SEED`` fixes the run's seed (default: a fresh one per
run, recorded in results.json as ``environment.layout_seed``). No torch here: the orchestrator (runner,
the fork server's client) pads and draws, the worker applies; both import this module.
"""

from __future__ import annotations

import json
import os
import random
import secrets
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

LAYOUT_ENV = "PERFGATE_LAYOUT"
LAYOUT_SEED_ENV = "PERFGATE_LAYOUT_SEED"
POLICIES = ("drawn", "fixed", "random", "none")

HEAP_STEP, HEAP_SPAN = 16, 65536  # the C heap's alignment; a draw spans 64 KiB of it
MMAP_PAGES = 512  # a draw reserves 0..511 pages ...
# ... below a fixed reservation of this many: the kernel puts a mapping in the highest gap that fits it, so a
# small reservation would fill a hole some earlier mapping left and move nothing; one this large goes below
# every hole, and what is mapped after it lands below it (address space only: PROT_NONE, never touched)
MMAP_BASE_PAGES = 16384

# The "fixed" policy (before 2026-11-26): one heap offset per process index, 64 bytes apart within a page;
# 23 is prime to 64, so indices 0..63 get every offset once.
INDEX_OFFSETS, INDEX_STEP, INDEX_BASE, INDEX_STRIDE = 64, 64, 16, 23


def policy() -> str:
    """The layout policy in force: ``PERFGATE_LAYOUT`` when it names one, else ``drawn``."""
    value = os.environ.get(LAYOUT_ENV, "drawn")
    return value if value in POLICIES else "drawn"


def fixed_layout_wanted() -> bool:
    """True when workers start without address-space randomization (every policy but ``random``): what
    each worker's layout is then comes from its own draw, not from the kernel's."""
    return policy() != "random" and sys.platform.startswith("linux")


LAYOUT_PAD_ENV = "PERFGATE_LAYOUT_PAD"
_PAGE = 4096
_SLOTS = 64  # argv and environment entries, together, are padded to a multiple of this


def padded_env(cmd: Sequence[str], env: dict[str, str]) -> dict[str, str]:
    """``env`` padded so that the new process's stack starts at the same address whatever its command line
    and environment: filler variables bring the number of argv and environment entries to a multiple of
    64 (execve puts one pointer per entry below the strings) and one padding variable brings the strings
    themselves to a multiple of a page. Why: with a fixed layout, the stack's start is the same in every
    worker only if both are the same size, and they are not (a run folder's name is on the worker's command
    line, CI sets different variables on different jobs); moving the stack by a few hundred bytes moved the
    conv rollout's step time by about 5% here, as Mytkowicz et al. ("Producing wrong data without doing
    anything obviously wrong", ASPLOS 2009) found for environment size (docs/gate.md)."""
    if not fixed_layout_wanted():
        return env
    env = {k: v for k, v in env.items() if not k.startswith(LAYOUT_PAD_ENV)}
    fillers = -(len(cmd) + len(env) + 1) % _SLOTS
    env.update({f"{LAYOUT_PAD_ENV}_{i}": "" for i in range(fillers)})
    used = sum(len(os.fsencode(a)) + 1 for a in cmd)
    used += sum(len(os.fsencode(k)) + len(os.fsencode(v)) + 2 for k, v in env.items())
    used += len(LAYOUT_PAD_ENV) + 2  # "NAME=" and its terminating NUL
    return {**env, LAYOUT_PAD_ENV: "x" * (-used % _PAGE)}


def padded_json(obj: Any, end: str = "") -> str:
    """``obj`` as JSON, padded with spaces so that, with ``end``, it fills whole pages. Why: a worker reads
    its case file and (forked) its request; their sizes vary with the run's names, and the size of what a
    process reads decides where its later allocations land, its tensors' among them. Padded, every worker
    of every run reads the same number of bytes. What they hold still lands on the heap, so names of another
    length move where the layouts each worker draws start from (docs/gate.md)."""
    text = json.dumps(obj)
    if fixed_layout_wanted():
        text += " " * (-(len(text.encode()) + len(end)) % _PAGE)
    return text + end


_seed: list[int] = []  # this run's layout seed, once drawn


def _plain_digits(text: str) -> bool:
    """An integer int() reads: ASCII digits, at most 18 (str.isdigit() also passes '²', which int() refuses)."""
    return text.isascii() and text.isdigit() and len(text) <= 18


def run_seed() -> int:
    """This run's layout seed: ``PERFGATE_LAYOUT_SEED`` when set to an integer, else drawn once per
    orchestrating process, so two runs sample different layouts and neither is "the" layout."""
    if not _seed:
        text = os.environ.get(LAYOUT_SEED_ENV, "").strip()
        _seed.append(int(text) if _plain_digits(text) else secrets.randbits(32))
    return _seed[0]


def reseed(offset: int) -> int:
    """Start another run's worth of layouts in this process (``perfgate calibrate``'s rounds, which must
    see what separate runs see): the seed ``PERFGATE_LAYOUT_SEED`` + ``offset`` when that is set, else a
    fresh one. Returns it."""
    text = os.environ.get(LAYOUT_SEED_ENV, "").strip()
    _seed[:] = [int(text) + offset if _plain_digits(text) else secrets.randbits(32)]
    return _seed[0]


def redraw() -> int:
    """Start a new set of layouts in this process, unlike every set it drew before (a re-measure, which
    must sample other layouts than the measurement it checks: its process indices start at 0 again, and
    under the same seed would get the same layouts): the current seed + 1 when ``PERFGATE_LAYOUT_SEED`` is
    set (repeatable), else a fresh one. Returns it."""
    text = os.environ.get(LAYOUT_SEED_ENV, "").strip()
    _seed[:] = [run_seed() + 1 if _plain_digits(text) else secrets.randbits(32)]
    return _seed[0]


def index_heap_offset(process_index: int) -> int:
    """The ``fixed`` policy's heap offset for a process index: the same in every run."""
    return INDEX_BASE + INDEX_STEP * ((process_index * INDEX_STRIDE) % INDEX_OFFSETS)


@dataclass(frozen=True)
class Layout:
    """One worker's drawn layout (recorded in results.json per process as ``layout``)."""

    policy: str
    seed: int | None  # the run's layout seed it was drawn from; None for the fixed and random policies
    heap_offset: int  # bytes of C heap taken before the workload
    mmap_pages: int  # pages of address space reserved before the workload

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def draw(process_index: int, seed: int | None = None, which: str | None = None, group: int = 0) -> Layout:
    """The layout of process ``process_index`` of a case under policy ``which`` (default: ``policy()``)
    and the run's ``seed`` (default: ``run_seed()``); ``group`` > 0: the layout it moves to for its
    ``group``-th group of samples (``[tool.perfgate.timing] layouts``). The same seed, index and group
    always give the same layout, so the two sides of a lockstep pair (the same index in one run) share
    theirs."""
    which = which or policy()
    if which == "fixed":
        return Layout("fixed", None, index_heap_offset(process_index), 0)
    if which in ("random", "none"):
        return Layout(which, None, 0, 0)
    seed = run_seed() if seed is None else seed
    rng = random.Random(f"perfgate-layout:{seed}:{process_index}" + (f":{group}" if group else ""))
    return Layout("drawn", seed, HEAP_STEP * (1 + rng.randrange(HEAP_SPAN // HEAP_STEP)), rng.randrange(MMAP_PAGES))


MALLOC_ENV = "PERFGATE_MALLOC"
MALLOC_POLICIES = ("steady", "system")
# glibc mallopt(3) parameters, and the values ``steady`` sets: blocks up to 32 MiB (the largest mmap threshold
# glibc accepts on 64-bit) come from the heap, and the heap's top is never given back while below 1 GiB.
# Both must be set: either alone turns the dynamic threshold off with the other at its 128 KiB default, and
# the conv rollout then took 39,000 page faults a unit instead of 0 (docs/gate.md)
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
STEADY_MMAP_THRESHOLD, STEADY_TRIM_THRESHOLD = 32 << 20, 1 << 30


def malloc_policy() -> str:
    """The C allocator policy in force: ``PERFGATE_MALLOC`` when it names one, else ``steady``."""
    value = os.environ.get(MALLOC_ENV, "steady")
    return value if value in MALLOC_POLICIES else "steady"


def _glibc() -> Any:
    """This process's C library when it is glibc (whose mallopt parameters ``steady`` sets), else None."""
    try:
        import ctypes

        libc = ctypes.CDLL(None)
    except (OSError, AttributeError):
        return None
    return libc if hasattr(libc, "gnu_get_libc_version") and hasattr(libc, "mallopt") else None


def _address(lib: Any, name: str) -> int | None:
    import ctypes

    try:
        return ctypes.cast(getattr(lib, name), ctypes.c_void_p).value
    except AttributeError:
        return None


def _mapped_file(address: int) -> str:
    """The file mapped at ``address`` in this process (/proc/self/maps), or "" where none is known."""
    try:
        with open("/proc/self/maps") as fh:
            for line in fh:
                fields = line.split(maxsplit=5)
                start, _, end = fields[0].partition("-")
                if int(start, 16) <= address < int(end, 16):
                    return fields[5].strip() if len(fields) > 5 else ""
    except (OSError, ValueError, IndexError):
        pass
    return ""


def preloaded_malloc(libc: Any = None) -> str | None:
    """The library whose ``malloc`` this process calls when it is not the C library's own (jemalloc or
    tcmalloc through ``LD_PRELOAD``): its path (or "preloaded" where it cannot be told), else None. Why:
    glibc's mallopt succeeds even when nobody calls glibc's malloc, so setting its thresholds proves nothing."""
    import ctypes

    libc = libc if libc is not None else _glibc()
    if libc is None:
        return None
    try:
        own = _address(ctypes.CDLL("libc.so.6"), "malloc")  # searched in the C library alone
    except OSError:
        return None
    used = _address(libc, "malloc")  # what the process's global symbol lookup finds: a preload first
    if own is None or used is None or own == used:
        return None
    return _mapped_file(used) or "preloaded"


def malloc_state() -> str:
    """What ``steady_malloc`` would give in a worker started from here (``perfgate doctor``), setting nothing."""
    if malloc_policy() != "steady":
        return "system"
    libc = _glibc()
    if libc is None:
        return "unavailable"
    return "preloaded" if preloaded_malloc(libc) else "steady"


# glibc's own knobs for the two thresholds (its environment variables, and their GLIBC_TUNABLES names): a user
# who sets one chose that threshold, and perfgate leaves it as set (docs/configuration.md "The C allocator")
USER_THRESHOLDS = {"mmap_threshold": ("MALLOC_MMAP_THRESHOLD_", "glibc.malloc.mmap_threshold"),
                   "trim_threshold": ("MALLOC_TRIM_THRESHOLD_", "glibc.malloc.trim_threshold")}


def user_thresholds(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The thresholds the environment sets through glibc's own knobs: knob name to the variable that sets it."""
    environ = dict(os.environ) if environ is None else environ
    tunables = {part.partition("=")[0].strip() for part in environ.get("GLIBC_TUNABLES", "").split(":")}
    found = {}
    for knob, (variable, tunable) in USER_THRESHOLDS.items():
        if tunable in tunables:
            found[knob] = "GLIBC_TUNABLES"
        elif variable in environ:
            found[knob] = variable
    return found


def hold_malloc() -> dict[str, Any]:
    """Under the ``steady`` policy, fix the C allocator's mmap and trim thresholds in this process (a worker,
    before its workload), so that its large temporaries are reused from the heap instead of mapped and
    faulted in anew at every step by some processes and not others. A threshold the user set through glibc's
    own knobs (``user_thresholds``) is left as the user set it. Returns what holds, as the worker records it:
    ``malloc``: ``steady`` (perfgate's values hold for every threshold not the user's), ``system`` (the policy
    asks for the allocator's defaults), ``unavailable`` (not glibc: nothing set) or ``preloaded`` (another
    allocator, LD_PRELOAD'ed, serves malloc: glibc's thresholds would change nothing, and nothing is set);
    ``set``: each threshold perfgate set, and the value glibc accepted; ``user``: each threshold left to the
    user's setting, and the variable that set it."""
    user = user_thresholds()
    held: dict[str, Any] = {"malloc": "system", "set": {}, "user": user}
    if malloc_policy() != "steady":
        return held
    libc = _glibc()  # musl and macOS have no such parameters: nothing is set there
    if libc is None or preloaded_malloc(libc):
        return {**held, "malloc": "unavailable" if libc is None else "preloaded"}
    import ctypes

    mallopt = libc.mallopt
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    done = True
    for knob, param, value in (("mmap_threshold", M_MMAP_THRESHOLD, STEADY_MMAP_THRESHOLD),
                               ("trim_threshold", M_TRIM_THRESHOLD, STEADY_TRIM_THRESHOLD)):
        if knob in user:
            continue
        if mallopt(param, value) == 1:
            held["set"][knob] = value
        else:
            done = False
    return {**held, "malloc": "steady" if done else "unavailable"}


def steady_malloc() -> str:
    """``hold_malloc()``'s state alone: ``steady``, ``system``, ``unavailable`` or ``preloaded``."""
    return str(hold_malloc()["malloc"])


_held: list[Any] = []  # what a layout took, alive for the process's life


def apply(layout: Layout) -> None:
    """Take the layout's heap bytes and address space in this process and keep them. The C heap serves a
    small allocation from a free chunk where one fits (then later allocations move less than the offset);
    the reservation is never touched, so it costs address space, not memory."""
    import ctypes
    import mmap

    if layout.heap_offset:
        try:
            libc = ctypes.CDLL(None)
            libc.malloc.restype = ctypes.c_void_p
            libc.malloc.argtypes = [ctypes.c_size_t]
            _held.append(libc.malloc(layout.heap_offset))
        except (OSError, AttributeError):  # no C library to ask: a Python buffer of the size instead
            _held.append(bytearray(layout.heap_offset))
    if layout.policy == "drawn":
        try:
            _held.append(mmap.mmap(-1, (MMAP_BASE_PAGES + layout.mmap_pages) * mmap.PAGESIZE,
                                   flags=mmap.MAP_PRIVATE, prot=0))  # PROT_NONE
        except (OSError, ValueError, AttributeError):
            pass
