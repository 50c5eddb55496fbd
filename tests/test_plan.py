"""perfgate.running.plan: suites -> cases on a hand-made catalog (what a worker probe reports). No torch."""

from __future__ import annotations

import pytest

from perfgate.model.config import ConfigError, Suite
from perfgate.running.plan import Catalog, canonical_toggles, plan_cases, resolve_device, select_workloads
from perfgate.worker import toggles

SIZES = {"smoke": {"T": 4}, "pr": {"T": 50}, "full": {"T": 500}}


@pytest.fixture
def catalog():
    return Catalog(
        workloads={
            "rollout": {"sizes": SIZES, "variants": {"groupnorm": "GroupNorm"}},
            "rollout_big": {"sizes": SIZES, "variants": {}},
            "md": {"sizes": {**SIZES, "huge": {"T": 5000}}, "variants": {"prealloc": "buffers"}},
        },
        toggles=toggles.catalog(),
        cuda_available=False,
    )


def test_suite_to_cases_in_order(catalog):
    suite = Suite("s", workloads=("*",), sizes=("smoke", "pr"), toggles=("eager", "compile"), device="cpu")
    cases = plan_cases(suite, catalog)
    assert [c.key for c in cases] == [
        "md/smoke/eager/cpu", "md/smoke/compile/cpu", "md/pr/eager/cpu", "md/pr/compile/cpu",
        "rollout/smoke/eager/cpu", "rollout/smoke/compile/cpu", "rollout/pr/eager/cpu", "rollout/pr/compile/cpu",
        "rollout_big/smoke/eager/cpu", "rollout_big/smoke/compile/cpu", "rollout_big/pr/eager/cpu",
        "rollout_big/pr/compile/cpu",
    ]
    assert cases[0].param_dict == {"T": 4} and cases[2].param_dict == {"T": 50}


def test_command_line_narrows_and_overrides(catalog):
    suite = Suite("s", workloads=("*",), sizes=("smoke",), toggles=("eager",), device="auto")
    cases = plan_cases(suite, catalog, workloads=["rollout"], toggles=["amp-bf16+compile"], size="full",
                       device="cpu")
    assert [c.key for c in cases] == ["rollout/full/compile+amp-bf16/cpu"]


def test_glob_patterns_and_their_order(catalog):
    assert select_workloads(["rollout*", "md"], catalog) == ["rollout", "rollout_big", "md"]
    assert select_workloads(["rollout", "rollout*"], catalog) == ["rollout", "rollout_big"]


@pytest.mark.parametrize("text,expected", [
    ("compile+amp-bf16", ("compile", "amp-bf16")),
    ("amp-bf16+compile", ("compile", "amp-bf16")),
    ("channels-last + compile-max-autotune + amp-fp16", ("compile-max-autotune", "amp-fp16", "channels-last")),
    ("groupnorm+compile", ("compile", "groupnorm")),
    ("eager", ("eager",)),
])
def test_composition_is_canonical(catalog, text, expected):
    assert canonical_toggles(text, catalog, "rollout") == expected


@pytest.mark.parametrize("text,message", [
    ("compile+compile-max-autotune", "combines compile and compile-max-autotune, which cannot compose"),
    ("amp-bf16+amp-fp16", "combines amp-bf16 and amp-fp16"),
    ("torchscript+compile", "combines torchscript and compile"),
    ("eager+compile", "'eager' is the untoggled reference and composes with nothing"),
    ("compile+", "has an empty part"),
    ("tf32+tf32", "names tf32 twice"),
])
def test_invalid_compositions(catalog, text, message):
    with pytest.raises(ConfigError, match=message):
        canonical_toggles(text, catalog, "rollout")


def test_unknown_toggle_lists_valid_names_including_variants(catalog):
    with pytest.raises(ConfigError) as exc:
        canonical_toggles("compiel", catalog, "rollout")
    msg = str(exc.value)
    assert msg.startswith("unknown toggle 'compiel' for workload 'rollout'; valid: ")
    for name in ("eager", "compile", "cuda-graphs", "inference-mode", "groupnorm"):
        assert name in msg
    assert "\n" not in msg


def test_unknown_workload_size_suite_device_list_valid_names(catalog):
    suite = Suite("s", workloads=("*",), sizes=("smoke",), toggles=("eager",), device="cpu")
    with pytest.raises(ConfigError, match="unknown workload 'nope'; valid: md, rollout, rollout_big"):
        plan_cases(suite, catalog, workloads=["nope"])
    with pytest.raises(ConfigError, match="unknown size 'huge' for workload 'rollout'; valid: smoke, pr, full"):
        plan_cases(suite, catalog, workloads=["rollout"], size="huge")
    with pytest.raises(ConfigError, match="unknown device 'tpu'; valid: auto, cpu, cuda"):
        resolve_device("tpu", catalog)


def test_a_size_applies_to_the_workloads_that_define_it(catalog):
    suite = Suite("s", workloads=("*",), sizes=("smoke", "huge"), toggles=("eager",), device="cpu")
    keys = [c.key for c in plan_cases(suite, catalog)]
    assert keys == ["md/smoke/eager/cpu", "md/huge/eager/cpu", "rollout/smoke/eager/cpu", "rollout_big/smoke/eager/cpu"]
    assert [c.key for c in plan_cases(suite, catalog, size="huge")] == ["md/huge/eager/cpu"]
    with pytest.raises(ConfigError, match="unknown size 'vast' for workload 'md'; valid: smoke, pr, full, huge "
                                          r"\(and no other selected workload has it\)"):
        plan_cases(suite, catalog, size="vast")


def test_variants_apply_only_to_the_workloads_that_define_them(catalog):
    suite = Suite("s", workloads=("rollout*",), sizes=("smoke",), toggles=("eager", "groupnorm", "compile+groupnorm"),
                  device="cpu")
    keys = [c.key for c in plan_cases(suite, catalog)]
    assert keys == ["rollout/smoke/eager/cpu", "rollout/smoke/groupnorm/cpu", "rollout/smoke/compile+groupnorm/cpu",
                    "rollout_big/smoke/eager/cpu"]


def test_variant_no_selected_workload_has_is_an_error(catalog):
    suite = Suite("s", workloads=("rollout_big",), sizes=("smoke",), toggles=("prealloc",), device="cpu")
    with pytest.raises(ConfigError, match="unknown toggle 'prealloc' for workload 'rollout_big'"):
        plan_cases(suite, catalog)


def test_duplicate_toggle_sets_collapse(catalog):
    suite = Suite("s", workloads=("md",), sizes=("smoke",), toggles=("compile+amp-bf16", "amp-bf16+compile"),
                  device="cpu")
    assert [c.key for c in plan_cases(suite, catalog)] == ["md/smoke/compile+amp-bf16/cpu"]


def test_auto_device_follows_the_probe(catalog):
    assert resolve_device("auto", catalog) == "cpu"
    gpu = Catalog(workloads=catalog.workloads, toggles=catalog.toggles, cuda_available=True)
    assert resolve_device("auto", gpu) == "cuda"
    suite = Suite("s", workloads=("md",), sizes=("smoke",), toggles=("eager",), device="auto")
    assert plan_cases(suite, gpu)[0].device == "cuda"


def test_from_probe():
    probe = {"workloads": {"a": {"sizes": SIZES}}, "toggles": toggles.catalog(),
             "environment": {"cuda_available": True}, "workload_errors": [{"file": "x.py", "error": "x.py: boom"}]}
    c = Catalog.from_probe(probe)
    assert c.cuda_available and c.errors[0]["error"] == "x.py: boom" and list(c.workloads) == ["a"]
