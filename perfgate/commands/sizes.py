"""`perfgate calibrate --sizes`: does a suite's size measure the regime of `full` on this device? No torch.

For each selected workload the eager case runs in one worker process at the suite's size (as `perfgate run
--suite` would run it here, recorded size_params included) and at `full`, with `full`'s length parameters
(``Workload.length_parameters``: steps, T) cut to the suite size's: they repeat a step and do not change what
one step does, and the profile window times single steps. Their bound classes
(perfgate.judging.roofline.case_bound) are compared. A size whose class differs from full's is grown toward
full, every shape parameter that full has larger together, on a geometric ladder (``ladder``); the smallest
rung with full's class is bisected for (``smallest_keeping``). All of it within a time budget: no worker is
started with less than ``MIN_STEP_S`` of it left, each is bounded by what is left, and what did not fit is
said. With ``write`` the chosen sizes go into the suite's table of pyproject.toml as
``[tool.perfgate.suites.NAME.size_params.KIND]`` (``record_text``), which `perfgate run` then plans with.
"""

from __future__ import annotations

import copy
import functools
import json
import math
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from perfgate.judging import roofline
from perfgate.model.config import ConfigError, Settings, Suite, read_toml, read_toml_text
from perfgate.model.results import STATUS_OK, CaseSpec
from perfgate.reports.console import echo
from perfgate.running import environment, run_folders, runner, workers
from perfgate.running.plan import (
    Catalog,
    check_size_params,
    device_kind,
    resolve_device,
    select_workloads,
    size_parameters,
)
from perfgate.util.formatting import failure_note
from perfgate.util.storage import atomic_write_json, atomic_write_text

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

SCHEMA = "perfgate.size-check/1"
DEFAULT_BUDGET_S = 300.0
# no worker is started with less of the budget left: start-up and the profile pass alone take seconds
MIN_STEP_S = 5.0
# rungs of the ladder from the suite's size to full's shape: bisected, about log2(8) = 3 measurements
RUNGS = 8
# The size check reads the profile, not the step time: a short sample budget per process, one layout.
TIMING: dict[str, Any] = {"samples": 3, "min_time_s": 0.05, "max_time_s": 10.0, "max_warmup": 10, "layouts": 1}
# Same class, idle fractions further apart than this: said in the note (the regime may be shifting).
IDLE_APART = 0.25


@dataclass
class Measurement:
    """One eager case of the check: its parameters and what its profile says about its regime."""

    params: dict[str, Any]
    status: str  # ok, failed, skipped, or "not measured" (the budget was spent)
    bound: str = ""  # the bound class; "" when the case gave no evidence to classify by
    reason: str = ""  # why that class, or why none
    idle: float | None = None  # device_idle_fraction
    mean_op_s: float | None = None
    seconds: float = 0.0

    @property
    def text(self) -> str:
        if self.status != STATUS_OK:
            return self.reason.split(":")[0] if self.reason.startswith("timeout") else self.status
        idle = "-" if self.idle is None else f"{self.idle * 100:.0f}%"
        return f"{self.bound or 'no class'} (idle {idle})"

    def to_json(self) -> dict[str, Any]:
        return {"params": self.params, "status": self.status, "bound": self.bound or None, "reason": self.reason,
                "device_idle_fraction": self.idle, "mean_op_s": self.mean_op_s, "seconds": round(self.seconds, 3)}


@dataclass
class SizeCheck:
    """One workload's row: its size against full, and the size that keeps full's regime where they differ."""

    workload: str
    size: str
    grown: list[str]  # the shape parameters full has larger: what a suggestion changes
    current: Measurement | None = None
    full: Measurement | None = None
    tried: list[Measurement] = field(default_factory=list)  # the ladder's rungs measured, in order
    suggested: dict[str, Any] | None = None  # the parameters to record (changed from the declared size)
    note: str = ""

    @property
    def same_regime(self) -> bool | None:
        """Whether the two classes agree; None when either has none (not measured, failed, no evidence)."""
        if self.current is None or self.full is None or not self.current.bound or not self.full.bound:
            return None
        return self.current.bound == self.full.bound

    def to_json(self) -> dict[str, Any]:
        return {"workload": self.workload, "size": self.size, "grown_parameters": self.grown,
                "current": None if self.current is None else self.current.to_json(),
                "full": None if self.full is None else self.full.to_json(),
                "same_regime": self.same_regime, "tried": [m.to_json() for m in self.tried],
                "suggested": self.suggested, "note": self.note}


# ---------------------------------------------------------------- sizes: pure

def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def full_cut(full: dict[str, Any], small: dict[str, Any], lengths: list[str]) -> dict[str, Any]:
    """``full``'s parameters with each length parameter cut to ``small``'s where that is shorter."""
    out = dict(full)
    for k in lengths:
        if _is_int(full.get(k)) and _is_int(small.get(k)):
            out[k] = min(full[k], small[k])
    return out


def grown_parameters(small: dict[str, Any], full: dict[str, Any], lengths: list[str]) -> list[str]:
    """The shape parameters to grow: integers of both sizes, not length ones, larger in ``full``."""
    return [k for k in small if k not in lengths and _is_int(small[k]) and _is_int(full.get(k))
            and full[k] > small[k] >= 1]


def ladder(small: dict[str, Any], full: dict[str, Any], grown: list[str], rungs: int = RUNGS) -> list[dict[str, Any]]:
    """Sizes from just past ``small`` to full's shape: the ``grown`` parameters together, each at
    small * (full / small) ** (k / rungs), rounded to a multiple of gcd(small, full) (a grid of 256 and one of
    1024 give 512 and 768, never 300: a value both sizes divide into is one the workload accepts), the
    other parameters ``small``'s; repeats left out. The last rung is full's shape."""
    out: list[dict[str, Any]] = []
    for k in range(1, rungs + 1):
        rung = dict(small)
        for p in grown:
            lo, hi = small[p], full[p]
            step = math.gcd(lo, hi)
            value = lo * (hi / lo) ** (k / rungs)
            rung[p] = max(lo, min(hi, step * round(value / step))) if k < rungs else hi
        if rung != small and (not out or rung != out[-1]):
            out.append(rung)
    return out


def smallest_keeping(rungs: list[dict[str, Any]], target: str,
                     measure: Callable[[dict[str, Any]], Measurement | None]) -> tuple[int, list[Measurement], str]:
    """The index of the smallest rung whose class is ``target``, bisecting between the suite's size (below
    rung 0, known to differ) and the last rung (full's shape, known to match); ``measure(params)`` runs one,
    None when the budget is spent. Returns (index, the measurements made, a note on what was not tried).
    The answer always keeps the regime; with the budget spent early it is a larger rung than needed."""
    lo, hi = -1, len(rungs) - 1
    tried: list[Measurement] = []
    moving = [k for k in rungs[0] if rungs[0][k] != rungs[-1].get(k)]

    def shown(rung: dict[str, Any]) -> str:  # the grown parameters alone: the others are the size's own
        return _params_text({k: rung[k] for k in moving} or rung)

    while hi - lo > 1:
        mid = (lo + hi) // 2
        m = measure(rungs[mid])
        if m is None:
            first, last = shown(rungs[lo + 1]), shown(rungs[hi - 1])
            return hi, tried, f"the budget was spent before {first if first == last else f'{first} to {last}'} was tried"
        tried.append(m)
        if m.status != STATUS_OK:
            return hi, tried, f"{shown(rungs[mid])} did not run ({m.reason or m.status}): searched no further"
        if m.bound == target:
            hi = mid
        else:
            lo = mid
    return hi, tried, ""


def _params_text(params: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in params.items())


def changed(params: dict[str, Any], declared: dict[str, Any]) -> dict[str, Any]:
    """The parameters of ``params`` that differ from the ``declared`` size: what a record holds."""
    return {k: v for k, v in params.items() if declared.get(k) != v}


# ---------------------------------------------------------------- the pyproject record

_BARE = re.compile(r"[A-Za-z0-9_-]+")


def toml_key(key: str) -> str:
    return key if _BARE.fullmatch(key) else json.dumps(key)


def toml_scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    return json.dumps(str(value))


def record_header(suite: str, kind: str) -> str:
    return f"[tool.perfgate.suites.{toml_key(suite)}.size_params.{kind}]"


def record_text(text: str, source: str, suite: str, kind: str, records: dict[str, dict[str, Any]]) -> str:
    """``text`` (a pyproject.toml) with ``records`` ({workload: {parameter: value}}) in the table
    ``[tool.perfgate.suites.SUITE.size_params.KIND]``: that table's lines replaced, or a new table at the end;
    every other line kept. ConfigError (nothing written) when the suite is not declared in the file, or when
    the result would not parse to the same configuration with just these records changed (a table written
    another way: inline, dotted keys)."""
    data = tomllib.loads(text)
    suites = data.get("tool", {}).get("perfgate", {}).get("suites", {})
    if suite not in suites:
        raise ConfigError(f"{source}: suite {suite!r} is not declared there ([tool.perfgate.suites.{suite}]); "
                          "--write records sizes in a suite's own table: declare the suite first")
    existing = suites[suite].get("size_params", {}).get(kind, {})
    merged = {**existing, **records}
    header = record_header(suite, kind)
    block = [header + "\n",
             "# sizes that keep full's regime on this kind of device (`perfgate calibrate --sizes --write`)\n"]
    block += [f"{toml_key(w)} = {{ {', '.join(f'{toml_key(k)} = {toml_scalar(v)}' for k, v in p.items())} }}\n"
              for w, p in merged.items()]
    lines = text.splitlines(keepends=True)
    at = next((i for i, line in enumerate(lines) if line.strip() == header), None)
    if at is None:
        gap = "" if not text else ("\n" if text.endswith("\n") else "\n\n")
        new = text + gap + "".join(block)
    else:
        end = next((j for j in range(at + 1, len(lines)) if lines[j].lstrip().startswith("[")), len(lines))
        tail = lines[end:]
        new = "".join(lines[:at] + block + (["\n"] if tail else []) + tail)
    expected = copy.deepcopy(data)
    table = expected["tool"]["perfgate"]["suites"][suite]
    table.setdefault("size_params", {})[kind] = merged
    try:
        same = tomllib.loads(new) == expected
    except tomllib.TOMLDecodeError:
        same = False
    if not same:
        raise ConfigError(f"{source}: {header} cannot be written without changing other keys there (size_params "
                          "written inline or as dotted keys?); write it as a table of its own, with "
                          + "; ".join(line.strip() for line in block[2:]))
    return new


def write_records(settings: Settings, suite: Suite, kind: str, records: dict[str, dict[str, Any]]) -> Path:
    """``records`` written into the suite's table of the configuration file, atomically; the file read again
    now (it may have changed while the check measured) and the result loaded once as a check."""
    from perfgate.model import config

    path = writable_source(settings, suite)
    new = record_text(read_toml_text(path), str(path), suite.name, kind, records)
    atomic_write_text(path, new)
    config.load(path)  # what `perfgate run` will read: a record it refuses is said now, not at the next run
    return path


def writable_source(settings: Settings, suite: Suite) -> Path:
    """The configuration file --write records in; ConfigError before any measuring when there is none, or
    when the suite is not declared in it."""
    if settings.source is None:
        raise ConfigError("--write records sizes in pyproject.toml's [tool.perfgate.suites] and there is none here "
                          "(no pyproject.toml with [tool.perfgate]); `perfgate init` starts one")
    suites = read_toml(settings.source).get("tool", {}).get("perfgate", {}).get("suites", {})
    if suite.name not in suites:
        raise ConfigError(f"{settings.source}: suite {suite.name!r} is not declared there "
                          f"([tool.perfgate.suites.{suite.name}]); --write records sizes in a suite's own table")
    return settings.source


# ---------------------------------------------------------------- measuring

@dataclass
class Budget:
    """Seconds the whole check may take, from its start."""

    seconds: float
    start: float = field(default_factory=time.monotonic)

    @property
    def left(self) -> float:
        return self.seconds - (time.monotonic() - self.start)

    @property
    def spent(self) -> float:
        return time.monotonic() - self.start


@dataclass(frozen=True)
class SizesOptions:
    suite: str | None = None
    workloads: tuple[str, ...] = ()
    budget_s: float = DEFAULT_BUDGET_S
    write: bool = False
    out: str | None = None


def options_from_calibrate(options: dict[str, Any], budget_s: float | None, out: str | None) -> SizesOptions:
    """`calibrate --sizes`'s options from calibrate's; ConfigError for one that cannot apply to it."""
    given = [f"--{k.replace('_', '-')}" for k in ("toggles", "rounds", "processes", "samples", "baseline_file")
             if options[k]] + (["--ceilings-only"] if options["ceilings_only"] else [])
    if given:
        raise ConfigError(f"calibrate --sizes measures the eager case of each workload with its own budget; "
                          f"{', '.join(given).replace('--baseline-file', '--baseline')} cannot apply to it")
    return SizesOptions(suite=options["suite"], workloads=options["workloads"], write=options["write"], out=out,
                        budget_s=DEFAULT_BUDGET_S if budget_s is None else budget_s)


def check_folder(settings: Settings) -> Path:
    return Path(settings.reports_dir) / ".sizes"


def choose_suite(settings: Settings, name: str | None) -> Suite:
    """The suite whose size is checked: as named, else ``pr`` where there is one, else the default suite.
    ConfigError when it runs more than one size, or runs `full` itself (nothing to compare with)."""
    suite = settings.suite(name or ("pr" if "pr" in settings.suites else settings.default_suite))
    if len(suite.sizes) != 1:
        raise ConfigError(f"calibrate --sizes checks a suite of one size; suite {suite.name!r} runs sizes "
                          f"{', '.join(suite.sizes)}: pass --suite with one of one size")
    if suite.sizes[0] == "full":
        raise ConfigError(f"suite {suite.name!r} runs size full itself: nothing to compare with; pass --suite pr")
    return suite


def check_sizes(settings: Settings, options: SizesOptions) -> list[SizeCheck]:
    """`perfgate calibrate --sizes`: the rows, printed as a table and written as JSON (rewritten after each
    measurement); with ``write`` the suggested sizes recorded. Its fork servers end with it."""
    try:
        return _check_sizes(settings, options)
    finally:
        workers.close_zygotes(under=check_folder(settings))


def _check_sizes(settings: Settings, options: SizesOptions) -> list[SizeCheck]:
    budget = Budget(options.budget_s)
    suite = choose_suite(settings, options.suite)
    if options.write:
        writable_source(settings, suite)
    work = check_folder(settings)
    probe = workers.run_probe(settings.workloads_dirs, settings.threads, run_folders.run_work_dir(work))
    catalog = Catalog.from_probe(probe)
    if catalog.errors:
        raise ConfigError(catalog.errors[0]["error"])
    size = suite.sizes[0]
    names = [n for n in select_workloads(options.workloads or suite.workloads, catalog)
             if size in catalog.workloads[n]["sizes"]]
    if not names:
        raise ConfigError(f"no selected workload has size {size!r}; nothing to check")
    check_size_params(suite, catalog)
    device = resolve_device(suite.device, catalog)
    if device.startswith("cuda") and not catalog.cuda_available:
        raise ConfigError(f"suite {suite.name!r} measures on {device} and this machine has no CUDA device torch can "
                          "use; check on a GPU, or pass --suite with a cpu (or auto) device")
    kind = device_kind(device)
    env = {**environment.host_environment(settings.root, settings.threads), **probe["environment"]}
    env["machine_key"] = environment.machine_key(env, device)
    ceilings = roofline.ceilings_for_run(settings.baselines_dir, env)
    out = Path(options.out) if options.out else Path(settings.reports_dir) / f"size-check-{kind}.json"
    rows, sizes = [], {}
    for name in names:
        info = catalog.workloads[name]
        lengths = [str(p) for p in info.get("length_parameters", ["steps"])]
        current = size_parameters(suite, catalog, name, size, device)
        sizes[name] = current, full_cut(info["sizes"]["full"], current, lengths)
        rows.append(SizeCheck(name, size, grown_parameters(current, info["sizes"]["full"], lengths)))
    document = {"schema": SCHEMA, "suite": suite.name, "size": size, "device": device,
                "machine_key": env["machine_key"], "budget_s": options.budget_s}

    def save(complete: bool) -> None:
        atomic_write_json(out, {**document, "spent_s": round(budget.spent, 1), "complete": complete,
                                "workloads": [r.to_json() for r in rows]})

    save(False)  # an unwritable --out is said before minutes of measuring
    slim = replace(settings, processes=1, timing=replace(settings.timing, **TIMING))
    echo(f"perfgate calibrate --sizes: suite {suite.name!r}, size {size} against full, eager on {device}, "
         f"{len(rows)} workload(s), budget {options.budget_s:g} s")

    def measure(name: str, size_name: str, params: dict[str, Any]) -> Measurement | None:
        left = budget.left
        if left < MIN_STEP_S:
            return None
        spec = CaseSpec(workload=name, size=size_name, toggles=("eager",), device=device,
                        params=tuple(sorted(params.items())))
        case = runner.run_case(spec, catalog.workloads[name]["file"], replace(slim, timeout_s=min(
            settings.timeout_s, left)), work)
        m = Measurement(params=dict(params), status=case.status, seconds=case.duration_s)
        if case.failure_class == "timeout":  # its message is the worker's last stderr lines, not the reason
            m.reason = f"timeout: not done in the {min(settings.timeout_s, left):.0f} s left of the budget"
        elif case.status != STATUS_OK:
            m.reason = failure_note(case.failure_class, case.message)
        else:
            bound = roofline.case_bound(case, ceilings)
            m.idle = bound.evidence.get("device_idle_fraction") if bound else case.metrics.get("device_idle_fraction")
            m.mean_op_s = bound.evidence.get("mean_op_s") if bound else case.metrics.get("mean_op_s")
            m.bound, m.reason = (bound.bound, bound.reason) if bound else ("", "no profile evidence to classify by")
        echo(f"  {name} {_params_text(changed(params, catalog.workloads[name]['sizes'][size]) or params)}"
             f" ({size_name}): {m.text} [{m.seconds:.1f} s]")
        return m

    for row in rows:  # first every workload's two sizes: the comparison itself
        current, full = sizes[row.workload]
        row.current = measure(row.workload, size, current)
        if row.current is not None:
            row.full = measure(row.workload, "full", full)
        save(False)
    for row in rows:  # then, within what is left, the sizes that keep the regime
        judge_row(row, catalog.workloads[row.workload]["sizes"][size], functools.partial(measure, row.workload, size))
        save(False)
    save(True)
    echo("")
    echo(table(rows, size))
    echo(f"size check: {out} ({budget.spent:.0f} s of a {options.budget_s:g} s budget)")
    records = {r.workload: r.suggested for r in rows if r.suggested}
    if options.write:
        if records:
            path = write_records(settings, suite, kind, records)
            echo(f"recorded {len(records)} size(s) in {path} {record_header(suite.name, kind)}: `perfgate run "
                 f"--suite {suite.name}` on {kind} runs them")
        else:
            echo("nothing to record: no size to change")
    return rows


def judge_row(row: SizeCheck, declared: dict[str, Any],
              measure: Callable[[dict[str, Any]], Measurement | None]) -> None:
    """Fill ``row``'s note and, where the classes differ, search and fill its suggestion."""
    for label, m in (("the size", row.current), ("full", row.full)):
        if m is None:
            row.note = f"{label} not measured: the budget was spent"
            return
        if m.status != STATUS_OK:
            row.note = f"{label} did not run: {m.reason or m.status}"
            return
        if not m.bound:
            row.note = f"{label} has no bound class: {m.reason}"
            return
    assert row.current is not None and row.full is not None  # for mypy: the loop returned otherwise
    if row.same_regime:
        if row.current.idle is not None and row.full.idle is not None and abs(row.current.idle - row.full.idle) > IDLE_APART:
            row.note = (f"same class, but the device idles {row.current.idle * 100:.0f}% of a step at this size and "
                        f"{row.full.idle * 100:.0f}% at full")
        return
    if not row.grown:
        row.note = ("no shape parameter is larger at full: the classes differ by noise or by what the length "
                    "parameters change; nothing to grow")
        return
    rungs = ladder(row.current.params, row.full.params, row.grown)
    index, tried, note = smallest_keeping(rungs, row.full.bound, measure)
    row.tried = tried
    row.suggested = changed(rungs[index], declared)
    row.note = note or (f"the smallest of {len(rungs)} sizes toward full that keeps {row.full.bound}"
                        if index < len(rungs) - 1 else "only full's shape keeps its class")


def table(rows: list[SizeCheck], size: str) -> str:
    """The console table: workload, the size's class and idle, full's, same regime?, suggested size."""
    header = ["workload", f"{size} class (idle)", "full class (idle)", "same regime?", "suggested size"]
    body = []
    for r in rows:
        same = {True: "yes", False: "NO", None: "-"}[r.same_regime]
        suggested = _params_text(r.suggested) if r.suggested else "-"
        body.append([r.workload, r.current.text if r.current else "not measured",
                     r.full.text if r.full else "not measured", same, suggested])
    widths = [max(len(x[i]) for x in [header, *body]) for i in range(len(header))]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip(),
             "  ".join("-" * w for w in widths)]
    for r, cells in zip(rows, body, strict=True):
        lines.append("  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip())
        if r.note:
            lines.append(f"    {r.note}")
    return "\n".join(lines)
