"""Suites -> cases. Pure: works on the catalog a worker probe reported, never imports a workload or torch."""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from perfgate.config import DEVICES, ConfigError, Suite
from perfgate.model import CaseSpec


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
    workload has it; otherwise it applies to the workloads that define it.
    """
    names = select_workloads(workloads or suite.workloads, catalog)
    sizes = (size,) if size else suite.sizes
    dev = resolve_device(device or suite.device, catalog)
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
    for name in names:
        info = catalog.workloads[name]
        for sz in sizes:
            if sz not in info["sizes"]:
                raise ConfigError(
                    f"unknown size {sz!r} for workload {name!r}; valid: {', '.join(info['sizes'])}"
                )
            params = tuple(sorted(info["sizes"][sz].items()))
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
