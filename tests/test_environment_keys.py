"""One table of environment keys with their roles (perfgate.model.environment_keys.KEYS): every list the gate,
the baseline updates and `merge` read is derived from it. No torch, no workers."""

from __future__ import annotations

from collections import Counter

import pytest

from perfgate.gating import merge
from perfgate.model import environment_keys as ek


def test_each_key_is_in_the_table_once_with_known_roles():
    assert not [k for k, n in Counter((k.name, k.recorded_in) for k in ek.KEYS).items() if n > 1]
    assert all(k.roles and set(k.roles) <= set(ek.ROLES) for k in ek.KEYS)
    assert {k.recorded_in for k in ek.KEYS} == {"environment", "settings"}
    # a key shards must agree on is never joined: merge refuses them before it joins anything
    assert not [k.name for k in ek.KEYS if ek.MERGED in k.roles and ek.JOINED in k.roles]


def test_every_list_is_the_tables():
    # the gate's, in the order comparison.json's environment_diff and its warning name them
    assert ek.ENVIRONMENT_KEYS == ("torch", "torch_cuda", "cudnn", "nvidia_driver", "python", "device_name",
                                   "cpu_model", "threads", "machine_key", "address_layout", "malloc")
    assert ek.keys_with(ek.SHARED) == ek.ENVIRONMENT_KEYS  # a partial update shares what the gate compares
    assert ek.ENVIRONMENT_BEFORE == {"malloc": "system"} and ek.TUNING_ENV == "tuning_env"
    assert set(merge.ENVIRONMENT_KEYS) == {"machine_key", "machine", "device_name", "compute_capability",
                                           "nvidia_driver", "torch", "torch_cuda", "cudnn", "python",
                                           "python_implementation", "perfgate", "git_commit"}
    assert merge.SETTINGS_KEYS == ("threads", "processes", "seed", "timing")
    # merge joins the host name and every compared key shards may differ in
    assert ek.keys_with(ek.JOINED) == ("hostname", "cpu_model", "threads", "address_layout", "malloc")
    assert set(ek.ENVIRONMENT_KEYS) <= set(ek.keys_with(ek.JOINED)) | set(merge.ENVIRONMENT_KEYS)


def test_the_tuning_variables_are_compared_one_by_one_not_as_a_key():
    assert ek.TUNING_ENV not in ek.ENVIRONMENT_KEYS and ek.TUNING_ENV not in ek.keys_with(ek.SHARED)
    diff = ek.environment_diff({"tuning_env": ["A=1"], "torch": "2.12"}, {"tuning_env": ["A=2"], "torch": "2.13"})
    assert diff == {"torch": ["2.12", "2.13"], "$A": ["1", "2"]}
    assert ek.environment_diff({"tuning_env": ["A=1"]}, {}, one_sided=True) == {"tuning_env": ["1 variable(s)", None]}


def test_a_merge_refusal_names_every_key_that_differs(tmp_path):
    from perfgate.model.config import ConfigError
    from perfgate.model.results import RunResult

    runs = [(tmp_path / f"{i}.json", RunResult(run_id=str(i), suite="s", environment=env, cases=[], settings={}),
             "perfgate.results/1") for i, env in enumerate(({"torch": "2.13", "machine_key": "a", "hostname": "x"},
                                                             {"torch": "2.12", "machine_key": "b", "hostname": "y"}))]
    with pytest.raises(ConfigError, match=r"environment differs from .*0.json: torch '2.12' \(expected '2.13'\), "
                                          r"machine_key 'b' \(expected 'a'\); shards must run"):
        merge.check_compatible(runs)
