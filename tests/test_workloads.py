"""The standard workloads in workloads/: build, step, determinism, toggles at smoke size, physics checks.

One real CLI run of the smoke suite (module-scoped, --samples 2 --processes 1) is the only test that
compiles; everything else runs eager, in process, at smoke size.
"""

from __future__ import annotations

import json
import sys

import pytest
import torch
from conftest import REPO, run_cli

from perfgate.worker import toggles
from perfgate.worker.discovery import discover

WORKLOADS = discover([REPO / "workloads"])
NAMES = sorted(WORKLOADS.workloads)
SMOKE_TOGGLES = ("eager", "compile", "amp-bf16", "channels-last")
# the smoke suite's workloads: all but the training one, whose smoke size tests/test_training.py runs
SMOKE_NAMES = [n for n in NAMES if n != "operator_training"]


def make(name: str):
    return WORKLOADS.workloads[name][0]()


def run_smoke(name: str, toggle_set: tuple[str, ...] = (), variants: frozenset[str] = frozenset(), **override):
    torch.set_num_threads(1)
    workload = make(name)
    params = {**workload.sizes["smoke"], **override}
    prepared = toggles.prepare(workload, params, "cpu", toggle_set, variants)
    return workload, workload.output(prepared.unit()).detach().clone()


def rel_l2(out: torch.Tensor, ref: torch.Tensor) -> float:
    diff = torch.linalg.vector_norm((out.to(ref.dtype) - ref).reshape(-1))
    return float(diff / torch.linalg.vector_norm(ref.reshape(-1)).clamp_min(1e-30))


def test_the_standard_workloads_are_all_found():
    assert WORKLOADS.errors == []
    assert set(NAMES) == {"operator_rollout", "operator_training", "wave_field", "condensate", "message_passing",
                          "detector_sim", "simulator_construction"}
    for name in NAMES:
        cls = WORKLOADS.workloads[name][0]
        assert "WORKLOADS.md" in sys.modules[cls.__module__].__doc__  # says which real effort it models
        assert cls.tolerance.rel_l2 is not None


def test_the_projects_suites_plan_every_workload_and_the_extra_sizes_where_defined():
    from perfgate.model import config
    from perfgate.running.plan import Catalog, plan_cases

    settings = config.load(str(REPO / "pyproject.toml"))
    catalog = Catalog(workloads={n: WORKLOADS.workloads[n][0].describe() for n in NAMES},
                      toggles=toggles.catalog(), cuda_available=True)
    for suite in ("smoke", "pr", "full"):
        cases = plan_cases(settings.suite(suite), catalog)
        assert {c.workload for c in cases} == set(SMOKE_NAMES if suite == "smoke" else NAMES), suite
    full = {(c.workload, c.size) for c in plan_cases(settings.suite("full"), catalog)}
    assert {s for w, s in full if w == "operator_rollout"} == {"full", "full-batch3"}
    assert {s for w, s in full if w == "wave_field"} == {"full", "extreme"}
    assert {s for w, s in full if w == "detector_sim"} == {"full", "pr-512"}
    assert {s for w, s in full if w == "condensate"} == {"full"}


@pytest.mark.parametrize("name", NAMES)
def test_builds_steps_and_is_deterministic_for_a_fixed_seed(name):
    _, first = run_smoke(name)
    _, second = run_smoke(name)  # a fresh build: same seed, same numbers
    assert torch.isfinite(first).all()
    assert first.abs().sum() > 0
    assert torch.equal(first, second)


@pytest.mark.parametrize("name", NAMES)
def test_amp_bf16_stays_within_the_workload_tolerance(name):
    workload, ref = run_smoke(name)
    _, out = run_smoke(name, ("amp-bf16",))
    assert rel_l2(out, ref) <= workload.tolerance.rel_l2


def test_channels_last_rollout_matches_eager():
    workload, ref = run_smoke("operator_rollout")
    _, out = run_smoke("operator_rollout", ("channels-last",))
    assert rel_l2(out, ref) <= 1e-5


def test_rollout_policies_differ_and_prealloc_changes_no_number():
    outs = {p: run_smoke("operator_rollout", policy=p)[1] for p in ("convex", "residual", "autoregressive")}
    assert not torch.allclose(outs["convex"], outs["residual"])
    assert not torch.allclose(outs["convex"], outs["autoregressive"])
    for policy, ref in outs.items():
        _, pre = run_smoke("operator_rollout", variants=frozenset({"prealloc"}), policy=policy)
        assert torch.allclose(pre, ref, rtol=1e-5, atol=1e-6), policy


def test_rollout_stochastic_block_is_part_of_the_step():
    _, noisy = run_smoke("operator_rollout")
    _, clean = run_smoke("operator_rollout", stochastic=False)
    assert not torch.allclose(noisy, clean)


@pytest.mark.parametrize("variant", ["groupnorm", "gelu-tanh"])
def test_rollout_model_variants_run(variant):
    _, base = run_smoke("operator_rollout")
    _, out = run_smoke("operator_rollout", variants=frozenset({variant}))
    assert torch.isfinite(out).all() and out.shape == base.shape


def test_message_passing_batched_variant_computes_the_same_numbers():
    four = ["H2", "H2O", "CH4", "benzene"]
    _, single = run_smoke("message_passing", molecules=four)
    _, batched = run_smoke("message_passing", variants=frozenset({"batched"}), molecules=four)
    assert single.shape == batched.shape == (4 + 3 * (2 + 3 + 5 + 12),)
    assert torch.allclose(single, batched, rtol=1e-4, atol=1e-5)


def test_message_passing_has_about_427k_parameters():
    module = WORKLOADS.workloads["message_passing"][0]
    built = module().build(module.sizes["smoke"], torch.device("cpu"), torch.float32, frozenset())
    params = sum(p.numel() for p in built.model.parameters())
    assert 400_000 <= params <= 450_000


def test_message_passing_forces_are_the_derivative_of_the_energy():
    """Central finite differences of E (float64) against the autograd forces, for water."""
    workload = make("message_passing")
    mp = sys.modules[type(workload).__module__]
    built = workload.build({"molecules": ["H2O"], "replicas": 1}, torch.device("cpu"), torch.float64, frozenset())
    graph = built.extra["graphs"][0]
    positions = graph["positions"] + 0.05 * torch.sin(torch.arange(9, dtype=torch.float64)).reshape(3, 3)
    _, forces = mp.energy_and_forces(built.model, graph, positions)
    eps = 1e-5
    numeric = torch.zeros_like(positions)
    with torch.no_grad():
        for atom in range(3):
            for axis in range(3):
                plus, minus = positions.clone(), positions.clone()
                plus[atom, axis] += eps
                minus[atom, axis] -= eps
                e_plus = built.model(plus, graph["species"], graph["senders"], graph["receivers"],
                                     graph["molecule"], 1).sum()
                e_minus = built.model(minus, graph["species"], graph["senders"], graph["receivers"],
                                      graph["molecule"], 1).sum()
                numeric[atom, axis] = -(e_plus - e_minus) / (2 * eps)
    assert forces.abs().max() > 1e-4  # a real gradient, not zeros compared with zeros
    assert torch.allclose(forces, numeric, rtol=1e-5, atol=1e-8)


def test_wave_field_is_complex64_inside_and_has_the_extreme_size():
    workload = make("wave_field")
    assert workload.sizes["extreme"] == {"points": 32768, "sources": 100, "vortices": 3, "steps": 20}
    built = workload.build(workload.sizes["smoke"], torch.device("cpu"), torch.float32, frozenset())
    with torch.no_grad():
        d = torch.cdist(built.model.points, built.model.sources)
        assert torch.polar(1.0 / d, d).dtype == torch.complex64


def test_condensate_conserves_its_norm_over_a_short_run():
    _, out = run_smoke("condensate", steps=50)
    phi = torch.view_as_complex(out)
    workload = make("condensate")
    phi0 = workload.build(workload.sizes["smoke"], torch.device("cpu"), torch.float32, frozenset()).state
    norm0, norm = (phi0.abs() ** 2).sum(), (phi.abs() ** 2).sum()
    assert phi.dtype == torch.complex64
    assert abs(float(norm / norm0) - 1.0) < 1e-2  # explicit Euler: slow growth only


def test_simulator_construction_counts_constructions_without_compiling():
    workload = make("simulator_construction")
    prepared = toggles.prepare(workload, workload.sizes["smoke"], "cpu", (), frozenset())
    prepared.unit()
    prepared.unit()
    metrics = workload.metrics(prepared.built)
    assert workload.compile_mode is None
    assert set(metrics) == {"first_compile_s", "setup_per_construction_s", "setup_exit_criterion_met"}
    assert len(prepared.built.extra["setup_s"]) == workload.sizes["smoke"]["constructions"]


def test_float_constants_variant_renders_the_same_image():
    _, ref = run_smoke("simulator_construction")
    _, out = run_smoke("simulator_construction", variants=frozenset({"float-constants"}))
    assert torch.allclose(out, ref, rtol=1e-6)


# ------------------------------------------------------------------ the smoke suite, through the real CLI


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("smoke") / "run"
    proc = run_cli("run", "--suite", "smoke", "--samples", "2", "--processes", "1", "--out", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads((out / "results.json").read_text())


@pytest.mark.slow
def test_smoke_suite_runs_every_workload_and_toggle(smoke_run):
    keys = {c["key"] for c in smoke_run["cases"]}
    assert keys == {f"{n}/smoke/{t}/cpu" for n in SMOKE_NAMES for t in SMOKE_TOGGLES}


@pytest.mark.slow
def test_every_smoke_case_runs_within_tolerance_or_is_skipped_with_a_reason(smoke_run):
    for case in smoke_run["cases"]:
        name, _, toggle, _ = case["key"].split("/")
        assert case["status"] in ("ok", "skipped"), (case["key"], case.get("message"))
        if case["status"] == "skipped":
            assert case["message"], case["key"]
            continue
        # the drift check against an eager fp32 reference from the same seed, run by the profile pass
        assert case["accuracy"].get("verdict") == "ok", (case["key"], case["accuracy"], case.get("profile", {}).get("errors"))
    skipped = {c["key"] for c in smoke_run["cases"] if c["status"] == "skipped"}
    expected = {f"{n}/smoke/channels-last/cpu" for n in SMOKE_NAMES if n != "operator_rollout"}
    assert skipped == expected


@pytest.mark.slow
def test_compiled_smoke_cases_compile_cold_into_a_fresh_cache_of_their_own(smoke_run):
    compiled = [c for c in smoke_run["cases"] if c["key"].split("/")[2] == "compile" and c["status"] == "ok"]
    assert len(compiled) == len(SMOKE_NAMES)
    for case in compiled:
        assert case["metadata"]["compile_cache"] == "fresh" and case["metrics"]["compile_cold_s"] > 0, case["key"]


@pytest.mark.slow
def test_simulator_construction_compiles_once_then_hits_the_cache(smoke_run):
    (case,) = [c for c in smoke_run["cases"] if c["key"] == "simulator_construction/smoke/compile/cpu"]
    metrics = case["metrics"]
    later = make("simulator_construction").sizes["smoke"]["constructions"] - 1
    assert metrics["construction_cache_hits"] == later
    assert metrics["construction_recompiles"] == 0
    assert metrics["first_compile_s"] > metrics["setup_per_construction_s"]


@pytest.mark.slow
def test_the_workloads_claims_that_hold_on_cpu_are_met_in_the_smoke_suite(smoke_run):
    """Each standard workload carries its team's claims (docs/expectations.md); every rule that matched a
    CPU smoke case is met (status, accuracy, the detector's <= 3 kernels, the simulator's setup and cache
    hits; message passing's bound class is decided), and the GPU claims matched nothing here."""
    exp = smoke_run["expectations"]
    rules = exp["rules"]
    assert {r["workload"] for r in rules} == set(SMOKE_NAMES)
    # the bound class is judged from op timing, which a loaded machine moves (a warn rule): decided, not
    # necessarily met; every other rule is met
    not_met = [(o["case_key"], o["text"], o["reason"]) for o in exp["outcomes"]
               if o["outcome"] != "met" and not o["text"].startswith("bound ")]
    assert not_met == []
    assert all(o["outcome"] != "unknown" for o in exp["outcomes"])
    assert not exp["gate_failed"]
    checked = {(o["case_key"], o["text"]) for o in exp["outcomes"]}
    assert ("simulator_construction/smoke/compile/cpu", "warm_setup_s <= 0.05") in checked
    assert ("detector_sim/smoke/compile/cpu", "kernel_concentration_80 <= 3") in checked
    assert ("message_passing/smoke/eager/cpu", "bound == overhead-bound") in checked
    assert {o["case_key"] for o in exp["outcomes"]} >= {f"{n}/smoke/eager/cpu" for n in SMOKE_NAMES}
    unmatched = [rules[i] for i in exp["unmatched"]]
    assert unmatched and all(r["pattern"].endswith("/cuda") for r in unmatched)
