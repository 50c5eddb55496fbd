"""``[tool.perfgate]`` in pyproject.toml -> typed, validated Settings. No torch.

perfgate finds the nearest pyproject.toml with a ``[tool.perfgate]`` table upward from the current
directory; ``--config PATH`` overrides. Relative paths in the table are relative to that file's folder.
Without any such file, the built-in defaults below apply (the smoke suite, CPU, ./workloads).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator

from perfgate.model.acknowledge import AcknowledgeTables, Entry, TodayError, entries, today
from perfgate.model.rules import ExpectError, parse_rules
from perfgate.util.validation import (
    Count,
    Integer,
    Name,
    Positive,
    Table,
    Text,
    TooLarge,
    check,
    expected,
    one_of,
    read_capped,
    satisfying,
    set_fields,
)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


class ConfigError(ValueError):
    """Bad configuration or bad input: reported as one line, exit code 2."""


DEVICES = ("auto", "cpu", "cuda")
# what a suite's size_params are recorded per: the kind of device a run resolves to
DEVICE_KINDS = ("cpu", "cuda")


@dataclass(frozen=True)
class Suite:
    name: str
    workloads: tuple[str, ...] = ("*",)
    sizes: tuple[str, ...] = ("smoke",)
    toggles: tuple[str, ...] = ("eager",)
    device: str = "auto"
    description: str = ""
    # each CUDA worker's memory capped at this many GB (a team's smaller card on a bigger one); None: no cap
    device_memory_gb: float | None = None
    # {device kind: {workload: {parameter: value}}}: the suite's one size with these parameters changed on
    # that kind of device (`perfgate calibrate --sizes --write` records a size that keeps full's regime)
    size_params: dict[str, dict[str, dict[str, int]]] | None = field(default=None, hash=False)


@dataclass(frozen=True)
class TimingSettings:
    """The sample budget of one worker process. Stored in each run's settings for later readers."""

    # timed samples per process, at least. 10, not more: the gate adds worker processes until a case is settled
    # (perfgate.judging.sequential), and processes, not samples, are its unit of evidence; with a 50 ms unit, 25
    # samples cost 1.25 s a process for a per-process step time that 10 samples give almost as well
    samples: int = 10
    # A sample repeats the unit until it lasts at least this long. Kept short on purpose: on a shared
    # CPU a long sample nearly always straddles a scheduler preemption, and the median cannot drop those;
    # 5 ms samples read the smoke rollout 2x slow at load 4 on 2 cores (docs/lab-record.md).
    min_sample_s: float = 0.0005
    max_warmup: int = 30  # warm-up units at most
    warmup_tolerance: float = 0.05  # warm-up ends when 3 consecutive units agree within this
    max_time_s: float = 30.0  # sampling stops early past this (after at least 3 samples)
    # Sampling goes on past `samples` until this much time has passed: a window of a few ms is one moment
    # of a shared machine's load (a busy SMT sibling slows every sample in it alike); half a second is many.
    min_time_s: float = 0.5
    # Memory layouts a worker samples one after the other (perfgate.protocol.layout): its samples come in this many
    # groups, each after the workload is built anew on a freshly drawn layout, and its step time is the
    # median over the groups. Applies to eager CPU cases timed on their own (not compiled, not graph-captured,
    # not in lockstep). 1 since 2026-12-06 (it was 3): with the workers' allocator steady, three groups neither
    # narrowed the estimates' spread nor changed a verdict on three outside families, and the rebuilds cost
    # 6-26% of a plain run's wall time (docs/lab-record.md, "What each mechanism buys"). Each process still draws
    # its own layout; more groups are for a workload whose step time a layout moves.
    layouts: int = 1


@dataclass(frozen=True)
class Settings:
    root: Path
    source: Path | None
    workloads_dirs: tuple[Path, ...]
    baselines_dir: Path
    reports_dir: Path
    threads: int = 1
    processes: int = 2
    timeout_s: float = 600.0
    seed: int = 0
    # address-space limit per worker process (MB); None = no limit. Past it an allocation fails in the
    # worker (MemoryError / allocator error -> failure class `oom`) instead of the machine thrashing.
    max_memory_mb: int | None = None
    # each CUDA worker's device memory capped at this many GB (torch.cuda.set_per_process_memory_fraction):
    # a case that would not fit the team's card fails `oom` on a bigger one. None: the suite's, else no cap
    device_memory_gb: float | None = None
    # a compiler-cache folder kept between runs (inductor and triton caches per case); None: every case
    # compiles into an empty cache of its own, so process 0's compile time is a cold one
    compile_cache: Path | None = None
    default_suite: str = "smoke"
    suites: dict[str, Suite] = field(default_factory=dict)
    timing: TimingSettings = TimingSettings()
    # sections owned by later layers (gate thresholds...): kept raw and validated by their modules
    extra: dict[str, Any] = field(default_factory=dict)
    # [tool.perfgate.expect]: expectation rules (perfgate.model.rules.Rule), validated at load
    expectations: tuple[Any, ...] = ()
    # environment variables workers get beyond perfgate's allow-list: names, or prefixes ending in "*"
    worker_env: tuple[str, ...] = ()
    # [[tool.perfgate.acknowledge]]: known regressions the gate lets pass (perfgate.model.acknowledge), validated at load
    acknowledgements: tuple[Entry, ...] = ()

    def suite(self, name: str) -> Suite:
        if name not in self.suites:
            raise ConfigError(f"unknown suite {name!r}; valid suites: {', '.join(sorted(self.suites)) or '(none)'}")
        return self.suites[name]

    def no_workloads(self, dirs: Sequence[Path] | None = None) -> str:
        """What `run` and `list` say where the workload folders (``dirs``, default ``workloads_dirs``) hold
        none: the folders, and whether a configuration named them."""
        where = f"[tool.perfgate] workloads_dirs of {self.source}" if self.source else \
            "the default; no pyproject.toml with [tool.perfgate] here or above"
        return f"no workloads found in {', '.join(str(d) for d in (dirs or self.workloads_dirs))} ({where})"

    def with_overrides(self, **kw: Any) -> Settings:
        return replace(self, **{k: v for k, v in kw.items() if v is not None})

    def to_json(self) -> dict[str, Any]:
        return {
            "config": str(self.source) if self.source else None,
            "workloads_dirs": [str(p) for p in self.workloads_dirs],
            "threads": self.threads,
            "processes": self.processes,
            "timeout_s": self.timeout_s,
            "seed": self.seed,
            "max_memory_mb": self.max_memory_mb,
            **({"device_memory_gb": self.device_memory_gb} if self.device_memory_gb else {}),
            "compile_cache": str(self.compile_cache) if self.compile_cache else None,
            "timing": self.timing.__dict__.copy(),
        }


# The embedded default: what `perfgate run` does in a folder with no [tool.perfgate] at all.
DEFAULT_SUITES = {
    "smoke": Suite("smoke", ("*",), ("smoke",), ("eager", "compile", "amp-bf16", "channels-last"), "cpu",
                   "Every workload at smoke size on CPU."),
}

def read_toml_text(path: Path) -> str:
    """The text of the TOML file ``path``, read under the size cap of every file perfgate reads
    (PERFGATE_MAX_FILE_MB, 64 MiB by default: a pyproject.toml is a few KiB); ConfigError naming the file
    when it is larger, unreadable or not UTF-8. A larger file is never read whole."""
    try:
        return read_capped(path)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror or exc})") from exc
    except TooLarge as exc:
        raise ConfigError(f"{path}: {exc}; not a configuration file (PERFGATE_MAX_FILE_MB raises the limit)") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start}); TOML files are UTF-8") from exc


def read_toml(path: Path) -> dict[str, Any]:
    """The parsed TOML of ``path`` (``read_toml_text``); ConfigError naming the file (and, for a syntax
    error, its line)."""
    text = read_toml_text(path)
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:  # its text ends "(at line N, column M)"
        raise ConfigError(f"{path}: not valid TOML ({exc})") from exc


def find_pyproject(start: Path) -> Path | None:
    """The nearest pyproject.toml with a [tool.perfgate] table, from ``start`` upward.

    A pyproject.toml on the way that cannot be read (a TOML syntax error, not UTF-8, unreadable) is a
    ConfigError, not a file to step over: it may hold the table meant to apply, and running with a
    parent's configuration or the defaults instead would be a silent surprise.
    """
    for d in [start, *start.parents]:
        candidate = d / "pyproject.toml"
        if candidate.is_file() and "perfgate" in read_toml(candidate).get("tool", {}):
            return candidate
    return None


TOML_NOUNS = {"model_type": "a table", "dict_type": "a table", "list_type": "an array"}


def _listify(value: Any) -> Any:
    return [value] if isinstance(value, str) else value  # `sizes = "smoke"` means ["smoke"]


def listed(item: Any) -> Any:
    """The type of a key holding a list of ``item`` (or one, as a string), read as a tuple."""
    return Annotated[list[item], BeforeValidator(_listify), AfterValidator(tuple)]


Strings = listed(Text)
Seconds = Annotated[Positive, AfterValidator(float)]
GigaBytes = Annotated[Positive, AfterValidator(float)]
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\*?")
EnvName = Annotated[str, satisfying(lambda v: bool(_ENV_NAME.fullmatch(v))),
                    expected("a variable name (letters, digits, _) or a prefix ending in *")]

# [tool.perfgate] as declared: each key's type, and what an error says would be valid. Defaults live in
# the dataclasses above; a key left out keeps them (load passes on only the keys a file sets).


class SuiteTable(Table):
    workloads: Strings | None = None  # type: ignore[valid-type]  # pydantic's Annotated type, built at import
    sizes: Strings | None = None  # type: ignore[valid-type]  # pydantic's Annotated type, built at import
    toggles: Strings | None = None  # type: ignore[valid-type]  # pydantic's Annotated type, built at import
    device: one_of(DEVICES) | None = None  # type: ignore[valid-type]  # pydantic's Annotated type, built at import
    description: Text | None = None
    device_memory_gb: GigaBytes | None = None
    size_params: dict[one_of(DEVICE_KINDS), dict[Name, dict[Name, Count]]] | None = None  # type: ignore[valid-type]  # pydantic's Annotated type, built at import


class TimingTable(Table):
    samples: Count | None = None
    min_sample_s: Seconds | None = None
    max_warmup: Count | None = None
    warmup_tolerance: Seconds | None = None
    max_time_s: Seconds | None = None
    min_time_s: Seconds | None = None
    layouts: Count | None = None


class PerfgateTable(Table):
    workloads_dirs: Strings | None = None  # type: ignore[valid-type]  # pydantic's Annotated type, built at import
    baselines_dir: Text | None = None
    reports_dir: Text | None = None
    threads: Count | None = None
    processes: Count | None = None
    timeout_s: Seconds | None = None
    seed: Integer | None = None
    max_memory_mb: Count | None = None
    device_memory_gb: GigaBytes | None = None
    compile_cache: Text | None = None
    default_suite: Text | None = None
    suites: dict[str, SuiteTable] | None = None
    timing: TimingTable | None = None
    # owned by later layers, which validate them: gate_settings.parse_gate, perfgate.history, perfgate.judging.expect
    gate: dict[str, Any] | None = None
    history: Annotated[str, expected("a database URL (a string)")] | None = None  # perfgate.history.store reads it
    expect: Any = None
    worker_env: listed(EnvName) | None = None  # type: ignore[valid-type]  # pydantic's Annotated type, built at import
    acknowledge: AcknowledgeTables | None = None  # perfgate.model.acknowledge.AcknowledgeTable, one per entry


def load(config: str | Path | None = None, cwd: Path | None = None) -> Settings:
    """Settings from ``config`` (a pyproject.toml) or the nearest one upward from ``cwd``."""
    cwd = Path(cwd or Path.cwd()).resolve()
    if config is not None:
        named = Path(config).resolve()
        if not named.is_file():
            raise ConfigError(f"config file {config} does not exist")
        source: Path | None = named
    else:
        source = find_pyproject(cwd)
    if source is None:
        return Settings(
            root=cwd,
            source=None,
            workloads_dirs=(cwd / "workloads",),
            baselines_dir=cwd / "baselines",
            reports_dir=cwd / "reports",
            suites=dict(DEFAULT_SUITES),
        )
    data = read_toml(source)
    raw = data.get("tool", {}).get("perfgate")
    if raw is None:
        raise ConfigError(f"{source}: has no [tool.perfgate] table")
    where = str(source)
    table = check(PerfgateTable, raw, where, table="tool.perfgate", error=ConfigError, nouns=TOML_NOUNS)
    given = set_fields(table)  # only the keys the file sets: defaults stay the dataclasses'
    root = source.parent
    timing = TimingSettings(**set_fields(given["timing"])) if "timing" in given else TimingSettings()
    suites = {name: Suite(name=name, **set_fields(body)) for name, body in given.get("suites", {}).items()}
    for suite in suites.values():
        if suite.size_params and len(suite.sizes) != 1:
            raise ConfigError(f"{where}: [tool.perfgate.suites.{suite.name}] size_params needs a suite of one size "
                              f"(it changes that size's parameters); this suite runs sizes {', '.join(suite.sizes)}")
    suites = suites or dict(DEFAULT_SUITES)
    try:
        expectations = tuple(parse_rules(raw.get("expect"), source=f"{where} [tool.perfgate.expect]"))
    except ExpectError as exc:
        raise ConfigError(str(exc)) from exc
    acknowledgements = entries(given.get("acknowledge"))
    if acknowledgements:
        try:  # a bad $PERFGATE_TODAY is said now, not after the run it would judge
            today()
        except TodayError as exc:
            raise ConfigError(str(exc)) from None
    default_suite = given.get("default_suite", "smoke" if "smoke" in suites else next(iter(suites)))
    if default_suite not in suites:
        raise ConfigError(f"{where}: default_suite {default_suite!r} is not a suite; valid: {', '.join(sorted(suites))}")
    plain = {k: given[k] for k in ("threads", "processes", "timeout_s", "seed", "max_memory_mb", "device_memory_gb", "worker_env") if k in given}
    return Settings(
        root=root,
        source=source,
        workloads_dirs=tuple(root / d for d in given.get("workloads_dirs", ("workloads",))),
        baselines_dir=root / given.get("baselines_dir", "baselines"),
        reports_dir=root / given.get("reports_dir", "reports"),
        compile_cache=root / given["compile_cache"] if "compile_cache" in given else None,
        default_suite=default_suite,
        suites=suites,
        timing=timing,
        extra={k: given[k] for k in ("gate", "history") if k in given},
        expectations=expectations,
        acknowledgements=acknowledgements,
        **plain,
    )
