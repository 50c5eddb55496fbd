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

TUNING_ENV = "tuning_env"  # environment: ["NAME=value", ...], what tunes the workers (runner.tuning_environment)
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
