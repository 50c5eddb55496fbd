"""Test-only workloads: one tiny workload that works, and one per way a case can fail.

Used by tests/test_faults.py and tests/test_cli.py through `perfgate run --workloads-dir tests/workloads`.
Each fails during its first call (the worker's first timed unit), the way a real workload would.
"""

from __future__ import annotations

import os
import time

import torch

from perfgate.workload import Built, Tolerance, TrainingWorkload, Workload

TINY = {"steps": 2, "n": 8}
SIZES = {"smoke": TINY, "pr": TINY, "full": TINY}


class Tiny(Workload):
    """A vector updated in place of a model: microseconds per step, so a case costs only the spawn."""

    name = "tiny"
    description = "a few additions on an 8-element vector (test only)"
    sizes = SIZES
    tolerance = Tolerance(rel_l2=1e-6)
    channels_last_applies = False
    variants = {"doubled": "adds the state to itself before each step (test variant)"}

    def build(self, params, device, dtype, variants):
        return Built(model=None, state=torch.zeros(params["n"], device=device, dtype=dtype),
                     extra={"doubled": "doubled" in variants})

    def step(self, model, state, built, params):
        if built.extra["doubled"]:
            state = state + state
        return state + 1.0


class Raises(Tiny):
    name = "fault_raise"
    description = "its step raises ValueError (test only)"

    def step(self, model, state, built, params):
        raise ValueError("boom: the step of fault_raise always fails")


class Hangs(Tiny):
    name = "fault_hang"
    description = "its step never returns (test only)"

    def step(self, model, state, built, params):
        time.sleep(3600)
        return state


class Aborts(Tiny):
    name = "fault_abort"
    description = "its step aborts the process with SIGABRT, like a failed C++ assertion (test only)"

    def step(self, model, state, built, params):
        os.abort()


class AllocatesTooMuch(Tiny):
    """Grows a list of 256 MB tensors up to 4 GB: past any --max-memory-mb the tests set.

    torch.empty leaves the pages untouched, so if no limit were applied this would end `ok` (and the test
    fail) rather than fill the machine.
    """

    name = "fault_oom"
    description = "allocates 256 MB tensors until the allocator refuses (test only)"

    def step(self, model, state, built, params):
        hoard = [torch.empty(256 * 2**20, dtype=torch.uint8) for _ in range(16)]
        return state + len(hoard)


class Unsupported(Tiny):
    name = "fault_unsupported"
    description = "calls an op torch does not implement for its dtype (test only)"

    def step(self, model, state, built, params):
        return torch.ones(3, dtype=torch.complex64).clamp(0)


class CompileFails(Tiny):
    name = "fault_compile"
    description = "asks torch.compile for a backend that does not exist (test only)"

    def step(self, model, state, built, params):
        return torch.compile(lambda x: x + 1, backend="no-such-backend")(state)


class ReturnsAString(Tiny):
    name = "fault_not_tensor"
    description = "its step returns a string instead of the new state (test only)"

    def step(self, model, state, built, params):
        return "not a tensor"


class ReturnsNothingAfterTheFirstUnit(Tiny):
    name = "fault_none_later"
    description = "its step returns the new state during the first unit of work, then None (test only)"
    steps_done = 0

    def step(self, model, state, built, params):
        self.steps_done += 1
        return super().step(model, state, built, params) if self.steps_done <= self.steps_per_unit(params) else None


class LeavesChildren(Tiny):
    """Starts three ``sleep`` processes in build: one in the worker's process group, one in a session of its
    own, one orphaned by its shell (re-parented); writes their pids to $PERFGATE_TEST_PIDS_FILE, then sleeps
    for PERFGATE_TEST_HANG_S seconds (default: past any timeout the tests set) or returns."""

    name = "spawns_children"
    description = "starts processes in and out of its process group, then hangs (test only)"

    def build(self, params, device, dtype, variants):
        import subprocess

        same_group = subprocess.Popen(["sleep", "300"])
        own_session = subprocess.Popen(["sleep", "301"], start_new_session=True)
        orphan = subprocess.run(["sh", "-c", "setsid sleep 302 >/dev/null 2>&1 & echo $!"], capture_output=True,
                                text=True, check=True).stdout.strip()
        with open(os.environ["PERFGATE_TEST_PIDS_FILE"], "a") as fh:
            fh.write(f"{same_group.pid} {own_session.pid} {orphan}\n")
        time.sleep(float(os.environ.get("PERFGATE_TEST_HANG_S", "3600")))
        return super().build(params, device, dtype, variants)


class Sleeps(Tiny):
    """Slow but healthy: 20 s in build, so a test can kill the orchestrator while this case runs."""

    name = "slow_build"
    description = "sleeps 20 s while building (test only)"

    def build(self, params, device, dtype, variants):
        time.sleep(20)
        return super().build(params, device, dtype, variants)


class Interrupts(Tiny):
    name = "fault_interrupt"
    description = "its step raises KeyboardInterrupt, as a workload's own signal handler might (test only)"

    def step(self, model, state, built, params):
        raise KeyboardInterrupt("raised by fault_interrupt's step")


class HugeMessage(Tiny):
    name = "fault_huge_message"
    description = "its step raises an exception whose message is 10 MB on one line (test only)"

    def step(self, model, state, built, params):
        raise ValueError("y" * 10_000_000)


class OddMetrics(Tiny):
    """Healthy, but its metrics() returns what results.json cannot hold next to a good figure, and its build
    sets torch's threads to 4 (past perfgate's pin of 1); its step records the threads it runs on."""

    name = "hostile_metrics_threads"
    description = "returns a string, a tensor, NaN and a tuple key as metrics; sets 4 threads in build (test only)"
    threads_in_steps = 0

    def build(self, params, device, dtype, variants):
        torch.set_num_threads(4)
        return super().build(params, device, dtype, variants)

    def step(self, model, state, built, params):
        self.threads_in_steps = torch.get_num_threads()
        return super().step(model, state, built, params)

    def metrics(self, built):
        return {"threads_in_steps": self.threads_in_steps, "s": "x" * 1_000_000, "t": torch.zeros(3),
                "n": float("nan"), (1, 2): 3.0}


class NoSteps(Tiny):
    name = "fault_no_steps"
    description = "its units are -3 steps long (test only)"

    def steps_per_unit(self, params):
        return -3


class NoLoss(TrainingWorkload):
    """A training step whose loss() forgot its ``return``: the case fails naming the workload, not a
    TypeError deep inside autograd."""

    name = "fault_no_loss"
    description = "a training workload whose loss() returns None (test only)"
    sizes = SIZES
    channels_last_applies = False

    def build(self, params, device, dtype, variants):
        return Built(model=torch.nn.Linear(params["n"], 1).to(device=device, dtype=dtype),
                     state=torch.ones(4, params["n"], device=device, dtype=dtype))

    def loss(self, model, batch, built, params):
        model(batch).square().mean()
