"""Suites -> cases. Pure: works on the catalog a worker probe reported, never imports a workload or torch."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfgate.model.config import DEVICES, ConfigError, Suite
from perfgate.model.results import CaseSpec
from perfgate.model.results_file import MAX_SHARDS


@dataclass(frozen=True)
class Catalog:
    """What a worker probe found: workloads (name -> describe()), toggles (registry order), the device."""

    workloads: dict[str, dict[str, Any]]
    toggles: list[dict[str, Any]]
    cuda_available: bool = False
    errors: tuple[dict[str, str], ...] = ()

    @classmethod
    def from_probe(cls, probe: dict[str, Any]) -> Catalog:
        return cls(
            workloads=probe.get("workloads", {}),
            toggles=probe.get("toggles", []),
            cuda_available=bool(probe.get("environment", {}).get("cuda_available")),
            errors=tuple(probe.get("workload_errors", [])),
        )


def parse_probe_answer(stdout: str, who: str) -> dict[str, Any]:
    """The probe answer a worker printed (its last line, a JSON object), checked for the fields a Catalog
    reads; ConfigError (exit 2) naming ``who`` when it is empty, not JSON or malformed."""
    from perfgate.util.validation import Fields, SchemaError, parse_json

    lines = stdout.strip().splitlines()
    if not lines:
        raise ConfigError(f"{who} answered nothing (expected a JSON line); is perfgate importable there?")
    try:
        data = parse_json(lines[-1], who, "the probe answer")
        f = Fields(data, who, "probe answer")

        def workload(value: Any, where: str) -> dict[str, Any]:
            w = Fields(value, who, where)
            return {**value, "sizes": w.get("sizes", w.values(w.obj), {}), "variants": w.get("variants", w.obj, {})}

        toggles = f.get("toggles", f.each(f.obj), [])
        for i, t in enumerate(toggles):
            Fields(t, who, f"toggles[{i}]").get("name", f.name, required=True)
        errors = f.get("workload_errors", f.each(f.obj), [])
        for i, e in enumerate(errors):
            Fields(e, who, f"workload_errors[{i}]").get("error", f.string, required=True)
        return {**data, "workloads": f.get("workloads", f.values(workload), {}), "toggles": toggles,
                "environment": f.get("environment", f.obj, {}), "workload_errors": errors}
    except SchemaError as exc:
        raise ConfigError(f"{exc} (last line: {ascii(lines[-1][:80])})") from exc


def canonical_toggles(text: str, catalog: Catalog, workload: str | None = None) -> tuple[str, ...]:
    """Parse ``"compile+amp-bf16"`` into the canonical tuple; ConfigError naming what is wrong.

    Names come from the global registry and, when ``workload`` is given, that workload's variants.
    Registry toggles sort in registry order, then variants alphabetically; ``eager`` stands alone.
    """
    known = {t["name"]: t for t in catalog.toggles}
    variants = catalog.workloads.get(workload, {}).get("variants", {}) if workload else {}
    parts = [p.strip() for p in text.split("+")]
    if any(not p for p in parts):
        raise ConfigError(f"toggle set {text!r} has an empty part; write names joined by '+', e.g. compile+amp-bf16")
    seen_groups: dict[str, str] = {}
    out = []
    for p in parts:
        if p in known:
            group = known[p].get("group")
            if group and group in seen_groups:
                raise ConfigError(f"toggle set {text!r} combines {seen_groups[group]} and {p}, which cannot compose")
            if group:
                seen_groups[group] = p
        elif p not in variants:
            valid = sorted(known) + sorted(variants)
            where = f" for workload {workload!r}" if workload else ""
            raise ConfigError(f"unknown toggle {p!r}{where}; valid: {', '.join(valid)}")
        if p in out:
            raise ConfigError(f"toggle set {text!r} names {p} twice")
        out.append(p)
    if "eager" in out and len(out) > 1:
        raise ConfigError(f"toggle set {text!r}: 'eager' is the untoggled reference and composes with nothing")
    order = {t["name"]: t.get("order", i) for i, t in enumerate(catalog.toggles)}
    return tuple(sorted(out, key=lambda n: (order.get(n, len(order)), n)))


def select_workloads(patterns: Sequence[str], catalog: Catalog) -> list[str]:
    names = sorted(catalog.workloads)
    chosen: list[str] = []
    for pat in patterns:
        matched = [n for n in names if fnmatch.fnmatchcase(n, pat)]
        if not matched:
            raise ConfigError(f"unknown workload {pat!r}; valid: {', '.join(names) or '(none found)'}")
        chosen.extend(m for m in matched if m not in chosen)
    return chosen


def resolve_device(device: str, catalog: Catalog) -> str:
    if device not in DEVICES:
        raise ConfigError(f"unknown device {device!r}; valid: {', '.join(DEVICES)}")
    if device == "auto":
        return "cuda" if catalog.cuda_available else "cpu"
    return device


def device_kind(device: str) -> str:
    """The kind of a resolved device ("cuda:1" -> "cuda"), as a suite's size_params are recorded per."""
    return "cuda" if device.startswith("cuda") else "cpu"


def check_size_params(suite: Suite, catalog: Catalog) -> None:
    """ConfigError (one line) unless every record of ``suite.size_params`` names a workload of the catalog and,
    for each, parameters its size declares with an integer value: a record from another project or an older
    workload would otherwise run a size nobody chose."""
    for kind, records in (suite.size_params or {}).items():
        where = f"[tool.perfgate.suites.{suite.name}.size_params.{kind}]"
        for name, record in records.items():
            info = catalog.workloads.get(name)
            if info is None:
                raise ConfigError(f"{where} names workload {name!r}, which is not found; valid: "
                                  f"{', '.join(sorted(catalog.workloads)) or '(none)'}")
            declared = info["sizes"].get(suite.sizes[0])
            if declared is None:
                raise ConfigError(f"{where} {name}: the workload has no size {suite.sizes[0]!r} to change")
            ints = [k for k, v in declared.items() if isinstance(v, int) and not isinstance(v, bool)]
            for param in record:
                if param not in ints:
                    raise ConfigError(f"{where} {name}: {param!r} is not an integer parameter of size "
                                      f"{suite.sizes[0]!r}; valid: {', '.join(ints) or '(none)'}")


def size_parameters(suite: Suite, catalog: Catalog, workload: str, size: str, device: str) -> dict[str, Any]:
    """The parameters ``workload`` runs ``size`` with in ``suite`` on ``device``: the workload's own, with the
    suite's record for that kind of device (size_params) over them when ``size`` is the suite's size."""
    params = dict(catalog.workloads[workload]["sizes"][size])
    if suite.size_params and size == suite.sizes[0]:
        params.update(suite.size_params.get(device_kind(device), {}).get(workload, {}))
    return params


def plan_cases(
    suite: Suite,
    catalog: Catalog,
    workloads: Sequence[str] = (),
    toggles: Sequence[str] = (),
    size: str | None = None,
    device: str | None = None,
) -> list[CaseSpec]:
    """The cases of ``suite``, narrowed or overridden by command-line choices. Order: workload, size, toggles.

    A toggle set naming a variant that some selected workload lacks is an error only when no selected
    workload has it; otherwise it applies to the workloads that define it. Sizes likewise: ``extreme``
    in a suite of every workload runs where a workload defines it.
    """
    names = select_workloads(workloads or suite.workloads, catalog)
    sizes = (size,) if size else suite.sizes
    dev = resolve_device(device or suite.device, catalog)
    check_size_params(suite, catalog)
    toggle_texts = list(toggles or suite.toggles)
    cases: list[CaseSpec] = []
    for text in toggle_texts:  # validate each toggle set once against some workload that accepts it
        errors = []
        for name in names:
            try:
                canonical_toggles(text, catalog, name)
                break
            except ConfigError as exc:
                errors.append(exc)
        else:
            raise errors[0] if errors else ConfigError(f"no workload selected for toggle set {text!r}")
    for sz in sizes:
        if not any(sz in catalog.workloads[name]["sizes"] for name in names):
            name = names[0]
            raise ConfigError(f"unknown size {sz!r} for workload {name!r}; valid: "
                              f"{', '.join(catalog.workloads[name]['sizes'])}"
                              + (" (and no other selected workload has it)" if len(names) > 1 else ""))
    for name in names:
        info = catalog.workloads[name]
        for sz in sizes:
            if sz not in info["sizes"]:
                continue  # a size of another workload
            params = tuple(sorted(size_parameters(suite, catalog, name, sz, dev).items()))
            seen: set[tuple[str, ...]] = set()
            for text in toggle_texts:
                try:
                    ts = canonical_toggles(text, catalog, name)
                except ConfigError:
                    continue  # a variant of another workload
                if ts in seen:
                    continue
                seen.add(ts)
                cases.append(CaseSpec(workload=name, size=sz, toggles=ts, device=dev, params=params))
    return cases


# ---------------------------------------------------------------- shards

# Seconds a case is expected to take when no earlier run timed it: compilation dominates a smoke or pr
# case (15-18 s per operator was measured for the rollout), so a compile case weighs several eager ones.
ESTIMATE_BASE_S = 5.0
ESTIMATE_TOGGLE_S = {
    "compile": 30.0,
    "compile-reduce-overhead": 40.0,
    "compile-max-autotune": 120.0,
    "torchscript": 10.0,
    "cuda-graphs": 10.0,
}


@dataclass(frozen=True)
class Shard:
    """One of ``count`` parts of a suite, numbered from 1 as a CI matrix names them (``--shard 2/4``)."""

    index: int
    count: int

    @property
    def text(self) -> str:
        return f"{self.index}/{self.count}"


_SHARD = re.compile(r"\s*([0-9]{1,9})\s*/\s*([0-9]{1,9})\s*")  # ASCII digits: str.isdigit() passed '²' to int()


def parse_shard(text: str) -> Shard:
    """``"I/N"`` -> Shard; ConfigError for anything else (1 <= I <= N <= MAX_SHARDS, what merge and every
    reader of results.json accept)."""
    m = _SHARD.fullmatch(text)
    if m is None:
        raise ConfigError(f"--shard {text!r} is not I/N; write e.g. --shard 1/4 (shards numbered from 1)")
    index, count = int(m.group(1)), int(m.group(2))
    if count > MAX_SHARDS:
        raise ConfigError(f"--shard {text!r}: N must be at most {MAX_SHARDS}, e.g. --shard 1/4")
    if count < 1 or not 1 <= index <= count:
        raise ConfigError(f"--shard {text!r}: I must be between 1 and N and N at least 1, e.g. --shard 1/{max(count, 1)}")
    return Shard(index, count)


def estimated_cost_s(spec: CaseSpec) -> float:
    """A rough expected duration for a case no earlier run has timed: the costliest toggle dominates."""
    return ESTIMATE_BASE_S + max((ESTIMATE_TOGGLE_S.get(t, 0.0) for t in spec.toggles), default=0.0)


def costs_from_results(data: dict[str, Any]) -> dict[str, float]:
    """``{case key: duration_s}`` from a results or baseline document (anything with ``cases`` carrying
    ``key`` or ``spec`` and ``duration_s``). Cases without a positive duration are left out."""
    costs: dict[str, float] = {}
    cases = data.get("cases", []) if isinstance(data, dict) else []
    if isinstance(cases, dict):  # a baseline keyed by case
        cases = [{"key": k, **v} for k, v in cases.items() if isinstance(v, dict)]
    for case in cases if isinstance(cases, list) else []:  # untrusted: null or a number holds no cases
        if not isinstance(case, dict):
            continue
        key = case.get("key")
        if key is None and isinstance(case.get("spec"), dict):
            try:
                key = CaseSpec.from_json(case["spec"]).key
            except (KeyError, TypeError, ValueError):  # SchemaError: a malformed spec
                continue
        duration = case.get("duration_s")
        if isinstance(key, str) and isinstance(duration, (int, float)) and duration > 0:
            costs[key] = float(duration)
    return costs


def expected_costs(cases: Sequence[CaseSpec], timed: dict[str, float] | None = None) -> dict[str, float]:
    """Each case's expected seconds: its earlier timing where ``timed`` has one, else the estimate.

    Timed and estimated cases are mixed on one scale: an untimed case is scaled by the ratio of timed
    durations to their estimates, so a fast machine's timings and the estimates stay comparable.
    """
    timed = timed or {}
    known = [c for c in cases if c.key in timed]
    scale = 1.0
    if known:
        scale = sum(timed[c.key] for c in known) / sum(estimated_cost_s(c) for c in known)
    return {c.key: timed[c.key] if c.key in timed else estimated_cost_s(c) * scale for c in cases}


def partition_cases(cases: Sequence[CaseSpec], count: int,
                    costs: dict[str, float] | None = None) -> list[list[CaseSpec]]:
    """Split ``cases`` into ``count`` lists with every case in exactly one, balanced by expected cost.

    Deterministic (same cases and costs -> same split on every runner): longest expected case first,
    ties broken by case key, each to the least loaded shard (lowest number on a tie). Within a shard
    the plan's order is kept, so a shard reads like a slice of the suite.
    """
    if count < 1:
        raise ConfigError(f"shard count must be at least 1, got {count}")
    cost = costs if costs is not None else expected_costs(cases)
    order = {c.key: i for i, c in enumerate(cases)}
    loads = [0.0] * count
    members: list[list[CaseSpec]] = [[] for _ in range(count)]
    for case in sorted(cases, key=lambda c: (-cost.get(c.key, estimated_cost_s(c)), c.key)):
        target = min(range(count), key=lambda i: (loads[i], i))
        members[target].append(case)
        loads[target] += cost.get(case.key, estimated_cost_s(case))
    return [sorted(m, key=lambda c: order[c.key]) for m in members]


def shard_cases(cases: Sequence[CaseSpec], shard: Shard, costs: dict[str, float] | None = None) -> list[CaseSpec]:
    """The cases of ``shard`` (see partition_cases)."""
    return partition_cases(cases, shard.count, costs)[shard.index - 1]


def load_costs(path: str | Path) -> dict[str, float]:
    """Case durations from a results.json, a run folder or a baseline file; ConfigError if unreadable."""
    p = Path(path)
    if p.is_dir():
        p = p / "results.json"
    from perfgate.util.validation import SchemaError, read_json_file

    try:
        data = read_json_file(p, "a results.json or baseline file")
    except SchemaError as exc:
        raise ConfigError(f"--shard-costs {exc}") from exc
    return costs_from_results(data)
