"""`perfgate list`: what a worker probe finds (the workloads with their sizes and variants, the toggles with
their requirements and whether each can run here) and the configured suites."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from perfgate.model.config import ConfigError, Settings
from perfgate.reports.console import echo
from perfgate.running.workers import run_probe


def list_catalog(settings: Settings, workloads_dirs: Sequence[str]) -> None:
    """Print the catalog and the suites; ConfigError (exit 2), after the listing, when a workload file failed
    to load."""
    dirs = [*settings.workloads_dirs, *(Path(d) for d in workloads_dirs)]
    probe = run_probe(dirs, settings.threads, toggles_here=True)
    env = probe["environment"]
    echo(f"torch {env['torch']}  cuda available: {env['cuda_available']}"
               + (f"  device: {env['device_name']}" if env.get("device_name") else ""))
    echo("\nWorkloads:")
    if not probe["workloads"]:
        echo(f"  ({settings.no_workloads(dirs)}; `perfgate init` starts a project)")
    for name, info in probe["workloads"].items():
        echo(f"  {name}: {info['description']}")
        for size, params in info["sizes"].items():
            echo(f"      {size}: " + ", ".join(f"{k}={v}" for k, v in params.items()))
        for v, desc in info.get("variants", {}).items():
            echo(f"      variant {v}: {desc}")
    errors = probe.get("workload_errors", [])
    for err in errors:
        echo(f"  ERROR {err['error']}")
    echo("\nToggles (requirements; can it run here?):")
    for t in probe["toggles"]:
        reqs = ", ".join(t["requires"]) or "-"
        here = "yes" if not t.get("unmet_here") else f"no: {t['unmet_here']}"
        echo(f"  {t['name']:<24} needs {reqs:<32} {here}")
    echo("\nSuites:")
    for s in settings.suites.values():
        echo(f"  {s.name}: {s.description}")
        echo(f"      workloads {', '.join(s.workloads)}; sizes {', '.join(s.sizes)}; device {s.device}")
        echo(f"      toggles {', '.join(s.toggles)}")
        for kind, records in (s.size_params or {}).items():  # sizes recorded by `calibrate --sizes --write`
            echo(f"      {s.sizes[0]} on {kind}: " + "; ".join(
                f"{w} " + ", ".join(f"{k}={v}" for k, v in p.items()) for w, p in records.items()))
    if errors:  # listed above with the rest; a broken workload file is still a configuration error
        raise ConfigError(f"{len(errors)} workload file(s) failed to load: {', '.join(e['file'] for e in errors)}")
