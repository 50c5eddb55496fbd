"""Workload discovery, the way pytest finds tests: every ``*.py`` file of the workloads folders imported under
a unique module name, each Workload subclass it defines checked against the API (names, sizes, variants,
``depends_on``, expectations), a file that fails to import an error naming the file. Runs in the worker only
(the probe and each case): the orchestrator never imports a workload file.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import sys
import traceback
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfgate.model.rules import ExpectError, parse_rules
from perfgate.util.paths import bad_project_glob
from perfgate.workload import Workload, WorkloadError

REQUIRED_SIZES = ("smoke", "pr", "full")


@dataclass
class Discovered:
    workloads: dict[str, tuple[type[Workload], Path]]
    errors: list[dict[str, str]]


# the longest workload, size or variant name: a case key joins them (workload/size/toggles/device) and is at
# most perfgate.util.validation.MAX_NAME (512) characters in results.json and the history store
MAX_PART = 100


def _bad_name(value: Any, what: str, separators: str) -> str | None:
    """Why ``value`` cannot be a ``what`` name, or None: a printable string of at most MAX_PART characters
    without the case key's separators (``separators``: "/" between its parts, "+" between toggles)."""
    if not isinstance(value, str) or not value or len(value) > MAX_PART or not value.isprintable():
        shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
        return f"{what} name {shown} is not a printable string of 1 to {MAX_PART} characters"
    if value != value.strip() or any(c in value for c in separators):
        return f"{what} name {value!r} has {' or '.join(repr(c) for c in separators)} or spaces at an end " \
               "(they separate the parts of a case key: workload/size/toggle+toggle/device)"
    return None


MAX_DEPENDS_ON = 100  # patterns a workload may declare


def bad_depends_on(value: Any) -> str | None:
    """Why ``value`` cannot be a workload's ``depends_on``, or None: a tuple (or list) of at most
    MAX_DEPENDS_ON glob patterns, each relative to the project's root and kept inside it
    (perfgate.util.paths.bad_project_glob)."""
    valid = ("depends_on must be a tuple of glob patterns relative to the project's root, "
             "e.g. (\"src/sim/**\", \"kernels/*.cu\")")
    if isinstance(value, str) or not isinstance(value, (tuple, list)):
        return f"{valid}, not {type(value).__name__} {str(value)[:60]!r}"
    if len(value) > MAX_DEPENDS_ON:
        return f"{valid}; {len(value)} patterns is more than {MAX_DEPENDS_ON}"
    for pattern in value:
        problem = bad_project_glob(pattern, "depends_on pattern")
        if problem:
            return problem
    return None


def _validate(cls: type[Workload], path: Path) -> str | None:
    problem = _bad_name(cls.name, "workload", "/")
    if problem:
        return f"{path}: {cls.__name__}: {problem}"
    if not cls.description or not isinstance(cls.description, str):
        return f"{path}: workload {cls.name!r} has no description"
    if not isinstance(cls.sizes, dict) or not all(isinstance(v, dict) for v in cls.sizes.values()):
        return f"{path}: workload {cls.name!r}: sizes must be a dict of size names to dicts of parameters"
    if not isinstance(cls.variants, dict):
        return f"{path}: workload {cls.name!r}: variants must be a dict of variant names to one line each"
    lengths = cls.length_parameters
    if not isinstance(lengths, (tuple, list)) or not all(isinstance(p, str) for p in lengths):
        return f"{path}: workload {cls.name!r}: length_parameters must be a tuple of parameter names, e.g. (\"T\",)"
    for size in cls.sizes:
        problem = _bad_name(size, "size", "/")
        if problem:
            return f"{path}: workload {cls.name!r}: {problem}"
    for variant in cls.variants:  # one named like a perfgate toggle: the worker's probe says so
        problem = _bad_name(variant, "variant", "/+,")
        if problem:
            return f"{path}: workload {cls.name!r}: {problem}"
    problem = bad_depends_on(cls.depends_on)
    if problem:
        return f"{path}: workload {cls.name!r}: {problem}"
    missing = [s for s in REQUIRED_SIZES if s not in cls.sizes]
    if missing:
        return f"{path}: workload {cls.name!r} lacks sizes {', '.join(missing)} (needs {', '.join(REQUIRED_SIZES)})"
    try:
        json.dumps(cls.describe(), allow_nan=False)
    except Exception as exc:  # an attribute of the wrong type, a parameter that is no JSON value
        return f"{path}: workload {cls.name!r}: {type(exc).__name__}: {exc}"
    try:
        parse_rules(cls.own_expectations() or None, source=f"{path}: workload {cls.name!r} expectations", workload=cls.name)
    except ExpectError as exc:
        return str(exc)
    return None


def load_file(path: Path) -> list[type[Workload]]:
    """Import one workload file under a unique module name; return the Workload subclasses it defines."""
    digest = hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:10]
    mod_name = f"perfgate_workload_{path.stem}_{digest}"
    spec = importlib.util.spec_from_file_location(mod_name, path)
    if spec is None or spec.loader is None:
        raise WorkloadError(f"{path}: not an importable Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module
    spec.loader.exec_module(module)
    found = []
    for obj in vars(module).values():
        if (
            isinstance(obj, type)
            and issubclass(obj, Workload)
            and obj is not Workload
            and obj.__module__ == mod_name
            and obj.name
        ):
            found.append(obj)
    return found


def workload_files(dirs: Iterable[str | Path]) -> list[Path]:
    files: list[Path] = []
    for d in dirs:
        p = Path(d)
        if p.is_file() and p.suffix == ".py":
            files.append(p)
        elif p.is_dir():
            files.extend(sorted(f for f in p.glob("*.py") if not f.name.startswith("_")))
    return files


def discover(dirs: Iterable[str | Path]) -> Discovered:
    """Every workload in ``dirs``; a file that fails to import is an error naming the file, not a crash."""
    workloads: dict[str, tuple[type[Workload], Path]] = {}
    errors: list[dict[str, str]] = []
    loaded: set[Path] = set()
    for f in workload_files(dirs):
        if f.resolve() in loaded:  # a folder named twice (the config's and --workloads-dir): its files once
            continue
        loaded.add(f.resolve())
        try:
            classes = load_file(f)
        except BaseException as exc:  # noqa: BLE001 - a user's file may raise anything at import, sys.exit too
            tb = traceback.format_exception_only(type(exc), exc)[-1].strip()
            tb = tb if len(tb) <= 300 else tb[:297] + "..."
            errors.append({"file": str(f), "error": f"{f}: failed to import: {tb}"})
            continue
        for cls in classes:
            problem = _validate(cls, f)
            if problem:
                errors.append({"file": str(f), "error": problem})
            elif cls.name in workloads:
                # in this file too: a subclass that kept its parent's name would replace it, unseen
                other_cls, other = workloads[cls.name]
                where = str(other) if other != f else f"this file by {other_cls.__name__} ({cls.__name__} needs a name of its own)"
                errors.append({"file": str(f), "error": f"{f}: workload {cls.name!r} already defined in {where}"})
            else:
                workloads[cls.name] = (cls, f)
    return Discovered(workloads=workloads, errors=errors)


def find(dirs: Iterable[str | Path], name: str) -> tuple[type[Workload], Path]:
    found = discover(dirs)
    if name not in found.workloads:
        errs = "; ".join(e["error"] for e in found.errors)
        raise WorkloadError(f"unknown workload {name!r}" + (f" ({errs})" if errs else ""))
    return found.workloads[name]
