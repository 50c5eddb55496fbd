"""Which keys of a run's environment set its numbers, and how two environments differ in them. One list, read
by the gate (a stored baseline measured in another environment), `baseline update --case` (cases of two
environments in one baseline) and `merge` (the keys a merged run reports per shard), so that a key recorded
for one of them cannot be missing from another. No torch, and no other perfgate module.
"""

from __future__ import annotations

from typing import Any

# Environment keys whose difference makes a stored baseline a doubtful reference, and one baseline holding
# cases measured under both a mixture.
ENVIRONMENT_KEYS = ("torch", "torch_cuda", "cudnn", "nvidia_driver", "python", "device_name", "cpu_model",
                    "threads", "machine_key", "address_layout", "malloc")
# what a key's absence means, where results written before it existed measured one way: workers used the C
# allocator's default thresholds until `malloc` was recorded (docs/gate.md)
ENVIRONMENT_BEFORE = {"malloc": "system"}

TUNING_ENV = "tuning_env"  # environment: ["NAME=value", ...], what tunes the workers (inherit.tuning_environment)
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
    out = {k: [sides[0].get(k), sides[1].get(k)] for k in ENVIRONMENT_KEYS
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
