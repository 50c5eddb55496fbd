"""Which keys of a run's record set its numbers, what each is for, and how two environments differ in them.
One table (``KEYS``), each key once with its roles, read by the gate (a stored baseline measured in another
environment), `baseline update --case` and pooled runs (cases of two environments in one baseline), and
`merge` (shards that are one measurement, and what a merged run lists per shard); every list below is
derived from it, so a key recorded for one of them cannot be missing from another. No torch, and no other
perfgate module.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# The roles of a key (``EnvironmentKey.roles``)
COMPARED = "compared"  # the gate: a stored baseline measured with another value is a doubtful reference
SHARED = "shared"  # `baseline update --case`, pooled runs: one baseline never mixes cases of two values
MERGED = "merged"  # `perfgate merge`: shards that differ in it are not parts of one measurement
JOINED = "joined"  # `perfgate merge`: shards may differ in it; the merged run lists every shard's value
TUNING = "tuning"  # the variables that tune the workers (["NAME=value", ...]), compared variable by variable
ROLES = (COMPARED, SHARED, MERGED, JOINED, TUNING)


@dataclass(frozen=True)
class EnvironmentKey:
    """A key of a run's record, the roles it plays (ROLES), where it is recorded (the run's ``environment``
    or its ``settings``) and what its absence means where results written before it existed measured one way."""

    name: str
    roles: tuple[str, ...]
    recorded_in: str = "environment"
    absent: str | None = None


_GATED = (COMPARED, SHARED)
# The table, in the order a difference is reported (comparison.json's environment_diff, a merge's refusal)
KEYS = (
    EnvironmentKey("hostname", (JOINED,)),
    EnvironmentKey("torch", (*_GATED, MERGED)),
    EnvironmentKey("torch_cuda", (*_GATED, MERGED)),
    EnvironmentKey("cudnn", (*_GATED, MERGED)),
    EnvironmentKey("nvidia_driver", (*_GATED, MERGED)),
    EnvironmentKey("python", (*_GATED, MERGED)),
    EnvironmentKey("device_name", (*_GATED, MERGED)),
    EnvironmentKey("cpu_model", (*_GATED, JOINED)),
    EnvironmentKey("threads", (*_GATED, JOINED)),
    EnvironmentKey("machine_key", (*_GATED, MERGED)),
    EnvironmentKey("address_layout", (*_GATED, JOINED)),
    # workers used the C allocator's default thresholds until `malloc` was recorded (docs/gate.md)
    EnvironmentKey("malloc", (*_GATED, JOINED), absent="system"),
    EnvironmentKey("machine", (MERGED,)),
    EnvironmentKey("compute_capability", (MERGED,)),
    EnvironmentKey("python_implementation", (MERGED,)),
    EnvironmentKey("perfgate", (MERGED,)),
    EnvironmentKey("git_commit", (MERGED,)),
    EnvironmentKey("tuning_env", (*_GATED, TUNING)),  # what tunes the workers (inherit.tuning_environment)
    # the settings that change what a sample means; the rest (timeouts, config paths) may differ
    EnvironmentKey("threads", (MERGED,), recorded_in="settings"),
    EnvironmentKey("processes", (MERGED,), recorded_in="settings"),
    EnvironmentKey("seed", (MERGED,), recorded_in="settings"),
    EnvironmentKey("timing", (MERGED,), recorded_in="settings"),
)


def keys_with(role: str, recorded_in: str = "environment") -> tuple[str, ...]:
    """The names of the keys recorded in ``recorded_in`` that play ``role``, in the table's order; the
    tuning variables' key only for TUNING (every other role compares it variable by variable)."""
    return tuple(k.name for k in KEYS if role in k.roles and k.recorded_in == recorded_in
                 and (role == TUNING or TUNING not in k.roles))


# Environment keys whose difference makes a stored baseline a doubtful reference, and one baseline holding
# cases measured under both a mixture.
ENVIRONMENT_KEYS = keys_with(COMPARED)
# what a key's absence means, where results written before it existed measured one way
ENVIRONMENT_BEFORE = {k.name: k.absent for k in KEYS if k.absent is not None}

(TUNING_ENV,) = keys_with(TUNING)  # environment: ["NAME=value", ...], what tunes the workers
TUNING_DIFF_MAX = 20  # variables named in a difference at most (a baseline file is untrusted)


def tuning_variables(value: Any) -> dict[str, str] | None:
    """An environment's ``tuning_env`` as {name: value}; None when it holds none (written before it was
    recorded, or not a list: untrusted)."""
    if not isinstance(value, list):
        return None
    return dict(item.partition("=")[::2] for item in value if isinstance(item, str))


def environment_diff(base_env: dict[str, Any], cur_env: dict[str, Any], *,
                     one_sided: bool = False) -> dict[str, list[Any]]:
    """The environment keys that matter for timing and differ: {key: [baseline, current]}; a variable that
    tunes the workers (``TUNING_ENV``, recorded on both sides) as ``$NAME``, None where a side lacks it.

    ``one_sided``: a key (or the tuning variables) recorded on one side only differs too, None on the side
    that lacks it: where the two are to be one measurement, what one side did not record is not known to
    be the other's (``ENVIRONMENT_BEFORE`` still says what an absence means)."""
    sides = [{**{k: v for k, v in ENVIRONMENT_BEFORE.items() if one_sided or k in other}, **env}
             for env, other in ((base_env, cur_env), (cur_env, base_env))]
    out = {k: [sides[0].get(k), sides[1].get(k)] for k in (keys_with(SHARED) if one_sided else ENVIRONMENT_KEYS)
           if (one_sided or (k in sides[0] and k in sides[1])) and sides[0].get(k) != sides[1].get(k)}
    b, c = tuning_variables(base_env.get(TUNING_ENV)), tuning_variables(cur_env.get(TUNING_ENV))
    if b is not None and c is not None:
        names = sorted(str(k) for k in {*b, *c} if b.get(k) != c.get(k))
        for name in names[:TUNING_DIFF_MAX]:
            out[f"${name[:100]}"] = [b.get(name), c.get(name)]
        if len(names) > TUNING_DIFF_MAX:
            out[f"(and {len(names) - TUNING_DIFF_MAX} more variables)"] = ["", ""]
    elif one_sided and (b is None) != (c is None):
        out[TUNING_ENV] = [None if t is None else f"{len(t)} variable(s)" for t in (b, c)]
    return out


PACKAGES = "packages"  # environment: ["name==version", ...], the distributions the workers import (the probe's)
PACKAGE_DIFF_MAX = 30  # packages named in a difference at most (a results file is untrusted)
PACKAGE_PREFIX = "package "  # a package's key in a difference: "package numpy"
# recorded under their own keys already (torch), or the same code on both sides whatever its version says
PACKAGES_NOT_DIFFED = frozenset({"torch"})


def package_versions(value: Any) -> dict[str, str] | None:
    """An environment's ``packages`` as {name: version}; None when it holds none (a perfgate from before it was
    recorded, or not a list: untrusted)."""
    if not isinstance(value, list):
        return None
    out: dict[str, str] = {}
    for item in value:
        if isinstance(item, str) and "==" in item:
            name, _, version = item.partition("==")
            out.setdefault(name[:100], version[:100])
    return out


def package_diff(base_env: dict[str, Any], cur_env: dict[str, Any]) -> dict[str, list[Any]]:
    """The distributions installed at different versions on the two sides, or on one side only: {"package
    NAME": [base version, current version]}, None where a side lacks it; {} when a side recorded none."""
    b, c = package_versions(base_env.get(PACKAGES)), package_versions(cur_env.get(PACKAGES))
    if b is None or c is None:
        return {}
    names = sorted(n for n in {*b, *c} if b.get(n) != c.get(n) and n not in PACKAGES_NOT_DIFFED)
    out: dict[str, list[Any]] = {f"{PACKAGE_PREFIX}{n}": [b.get(n), c.get(n)] for n in names[:PACKAGE_DIFF_MAX]}
    if len(names) > PACKAGE_DIFF_MAX:
        out[f"(and {len(names) - PACKAGE_DIFF_MAX} more packages)"] = ["", ""]
    return out


def side_by_side_diff(base_env: dict[str, Any], cur_env: dict[str, Any]) -> dict[str, list[Any]]:
    """What differs between the environments of two sides measured in one job (``run --base-python``):
    the keys that set numbers, the tuning variables and the package versions, {key: [base, head]}."""
    return {**environment_diff(base_env, cur_env), **package_diff(base_env, cur_env)}


def change_text(diff: dict[str, list[Any]], limit: int = 8) -> str:
    """A difference as a person reads it: "torch 2.4.0 -> 2.5.0, package numpy 1.26.4 -> 2.1.0, $KNOB
    none -> 1", at most ``limit`` entries then how many more."""
    def shown(value: Any) -> str:
        return "none" if value is None else str(value)[:80]

    items = []
    for key, pair in diff.items():
        a, b = (list(pair) + [None, None])[:2] if isinstance(pair, list | tuple) else (None, None)
        items.append(key if key.startswith("(") else f"{key} {shown(a)} -> {shown(b)}")
    more = f", and {len(items) - limit} more" if len(items) > limit else ""
    return ", ".join(items[:limit]) + more


def change_under_test(mode: str, diff: dict[str, list[Any]], limit: int = 8) -> str:
    """'the environment: torch 2.4.0 -> 2.5.0, package numpy 1.26.4 -> 2.1.0' where the two sides of a same-job
    comparison (``mode`` "against") ran in different environments (`run --base-python`, `--base-env`): the
    change under test; '' otherwise (a stored baseline's different environment is a warning, not the change)."""
    if mode != "against" or not diff:
        return ""
    return f"the environment: {change_text(diff, limit)}"
