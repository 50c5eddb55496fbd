"""A CUDA process's GPU clocks around its timed samples (perfgate.worker.gpu_clocks), recorded in results.json.

There is no GPU on the machines these tests run on, so most of them hand perfgate a fake ``pynvml`` module
through ``sys.modules``: they test perfgate's own wiring (which NVML calls it makes, when, what it records
and how it survives NVML errors), not NVML. The API names the fake carries are nvidia-ml-py's own
(checked against nvidia-ml-py 13.615). The last test reads a real GPU and skips without CUDA and pynvml.
"""

from __future__ import annotations

import json
import subprocess
import sys
import types
from pathlib import Path

import pytest

from perfgate.model.results import CaseResult, CaseSpec, ProcessSamples, RunResult, load_results
from perfgate.util.validation import SchemaError
from perfgate.worker import gpu_clocks
from perfgate.worker.measure import PerfCounterTimer, measure, timer_for

REPO = Path(__file__).resolve().parent.parent


class FakeNVMLError(Exception):
    pass


def fake_pynvml(*, clock=lambda: 1980, reasons=lambda: 0, old_api=False, fail=(), bus_ids=()) -> types.ModuleType:
    """A module with nvidia-ml-py's names: ``clock()`` and ``reasons()`` give each reading; a name in
    ``fail`` raises as NVML does (not supported, no permission); ``calls`` logs every call made."""
    m = types.ModuleType("pynvml")
    m.NVML_CLOCK_SM, m.NVML_TEMPERATURE_GPU, m.NVMLError = 1, 0, FakeNVMLError
    m.calls = []

    def api(name, value):
        def call(*args):
            m.calls.append((name, args))
            if name in fail:
                raise FakeNVMLError(f"{name}: Not Supported")
            return value(*args)
        setattr(m, name, call)

    api("nvmlInit", lambda: None)
    api("nvmlShutdown", lambda: None)
    api("nvmlDeviceGetHandleByIndex", lambda i: f"handle-{i}")
    api("nvmlDeviceGetHandleByUUID", lambda u: f"handle-{u}")

    def by_bus_id(bus_id):
        if bus_id not in bus_ids:
            raise FakeNVMLError("Not Found")
        return f"handle-{bus_id}"

    api("nvmlDeviceGetHandleByPciBusId", by_bus_id)
    api("nvmlDeviceGetClockInfo", lambda h, kind: clock())
    api("nvmlDeviceGetMaxClockInfo", lambda h, kind: 1980)
    api("nvmlDeviceGetTemperature", lambda h, sensor: 71)
    api("nvmlDeviceGetPowerUsage", lambda h: 612345)  # milliwatts
    api("nvmlDeviceGetCurrentClocksThrottleReasons" if old_api else "nvmlDeviceGetCurrentClocksEventReasons",
        lambda h: reasons())
    return m


@pytest.fixture
def nvml(monkeypatch):
    """Install a fake pynvml (``nvml(**options)``) for this test; CUDA_VISIBLE_DEVICES unset, and no PCI bus
    id from torch (on a machine with a GPU the real one would be tried first: 2026-11-26, an H200)."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(gpu_clocks, "_pci_bus_id", lambda device_index: None)

    def install(**options):
        module = fake_pynvml(**options)
        monkeypatch.setitem(sys.modules, "pynvml", module)
        return module

    return install


def test_reason_names_keep_an_unknown_bit():
    assert gpu_clocks.reason_names(0) == []
    assert gpu_clocks.reason_names(0x1 | 0x20 | 0x4) == ["gpu_idle", "sw_power_cap", "sw_thermal_slowdown"]
    assert gpu_clocks.reason_names(0x8 | 0x1000) == ["hw_slowdown", "0x1000"]


def test_the_clocks_are_read_right_before_and_right_after_the_timed_samples(nvml):
    """The fake's SM clock is the number of units run so far: the reading before the samples comes after
    the first call and the warm-up, the one after them after the last sample, and no reading lands inside
    a sample."""
    units = []
    readings = iter([0x1, 0x20])  # idle at the start of the samples, thermal slowdown by their end
    fake = nvml(clock=lambda: len(units), reasons=lambda: next(readings))
    clocks = gpu_clocks.recorder_for("cuda:0")
    m = measure(lambda: units.append(1), PerfCounterTimer(), samples=5, min_sample_s=0.0, around_samples=clocks.at)
    r = clocks.record()
    assert r["sm_clock_mhz_before"] == 1 + m.warmup_units
    assert r["sm_clock_mhz_after"] == len(units) == 1 + m.warmup_units + m.loops * len(m.samples_ns)
    assert r["max_sm_clock_mhz"] == 1980
    assert r["throttle_reasons_before"] == ["gpu_idle"] and r["throttle_reasons_after"] == ["sw_thermal_slowdown"]
    assert r["temperature_c"] == 71 and r["power_w"] == 612.3
    assert r["nvml_device"] == "index 0" and r["error"] is None
    assert fake.calls[-1][0] == "nvmlShutdown"


def test_the_older_throttle_reasons_call_is_used_where_the_event_reasons_one_is_missing(nvml):
    nvml(old_api=True, reasons=lambda: 0x40)
    clocks = gpu_clocks.recorder_for("cuda")
    clocks.at("before")
    clocks.at("after")
    assert clocks.record()["throttle_reasons_after"] == ["hw_thermal_slowdown"]


def test_nvml_errors_never_fail_a_case_they_are_recorded(nvml):
    # one reading not supported on this board: the rest is recorded, the reason said
    nvml(fail=("nvmlDeviceGetTemperature", "nvmlDeviceGetCurrentClocksEventReasons"))
    clocks = gpu_clocks.recorder_for("cuda:0")
    clocks.at("before")
    clocks.at("after")
    r = clocks.record()
    assert r["sm_clock_mhz_before"] == 1980 and r["power_w"] == 612.3
    assert r["temperature_c"] is None and r["throttle_reasons_after"] is None
    assert "temperature_c: FakeNVMLError" in r["error"] and "throttle_reasons_before" in r["error"]
    # NVML does not start at all (no driver, no permission): nothing read, the case goes on
    nvml(fail=("nvmlInit",))
    clocks = gpu_clocks.recorder_for("cuda:0")
    clocks.at("before")
    clocks.at("after")
    r = clocks.record()
    assert r["sm_clock_mhz_after"] is None and r["error"].startswith("NVML did not initialise")
    # no handle for the device: said, with every way tried
    nvml(fail=("nvmlDeviceGetHandleByIndex",))
    clocks = gpu_clocks.recorder_for("cuda:0")
    clocks.at("after")
    assert clocks.record()["error"].startswith("no NVML handle for cuda:0 (index 0: FakeNVMLError")


def test_no_pynvml_or_a_cpu_case_records_nothing(nvml, monkeypatch):
    nvml()
    assert gpu_clocks.recorder_for("cpu") is None
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    assert gpu_clocks.recorder_for("cuda:0") is None


def test_the_device_is_found_as_cuda_visible_devices_numbers_it(nvml, monkeypatch):
    """torch's cuda:1 is the second entry of CUDA_VISIBLE_DEVICES, an NVML index or a UUID."""
    fake = nvml()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5, 2")
    assert gpu_clocks.recorder_for("cuda:1").record()["nvml_device"] == "index 2 (CUDA_VISIBLE_DEVICES)"
    assert ("nvmlDeviceGetHandleByIndex", (2,)) in fake.calls
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-aaaa,GPU-bbbb")
    assert gpu_clocks.recorder_for("cuda:1").record()["nvml_device"] == "uuid GPU-bbbb (CUDA_VISIBLE_DEVICES)"


def test_the_pci_bus_id_names_the_device_first(nvml, monkeypatch):
    """Where torch gives the device's PCI bus id, NVML is asked for that device: CUDA's numbering (fastest
    first by default) need not be NVML's (PCI order)."""
    nvml(bus_ids=("00000000:17:00.0",))
    monkeypatch.setattr(gpu_clocks, "_pci_bus_id", lambda index: "00000000:17:00.0")
    assert gpu_clocks.recorder_for("cuda:0").record()["nvml_device"] == "pci 00000000:17:00.0"
    # a bus id NVML does not know: the index is tried next
    monkeypatch.setattr(gpu_clocks, "_pci_bus_id", lambda index: "00000000:99:00.0")
    assert gpu_clocks.recorder_for("cuda:0").record()["nvml_device"] == "index 0"


def _process(gpu_clocks_record) -> dict:
    return {"samples_ns": [1000, 1100], "process_index": 0, "gpu_clocks": gpu_clocks_record}


def _results(process: dict) -> dict:
    case = CaseResult(spec=CaseSpec("w", "smoke", ("eager",), "cuda"), status="ok",
                      processes=[ProcessSamples.from_json(_process(None))])
    data = json.loads(RunResult(run_id="r", suite="smoke", environment={}, cases=[case]).dumps())
    data["cases"][0]["processes"][0] = process
    return data


def test_the_clock_readings_survive_a_results_json_round_trip(nvml, tmp_path):
    nvml(reasons=lambda: 0x4)
    clocks = gpu_clocks.recorder_for("cuda:0")
    clocks.at("before")
    clocks.at("after")
    record = clocks.record()
    path = tmp_path / "results.json"
    path.write_text(json.dumps(_results(_process(record))))
    (p,) = load_results(path).cases[0].processes
    assert p.gpu_clocks == record and p.gpu_clocks["throttle_reasons_after"] == ["sw_power_cap"]
    path.write_text(load_results(path).dumps())
    assert load_results(path).cases[0].processes[0].gpu_clocks == record
    # results written before clocks were recorded read as None
    old = _results(_process(None))
    del old["cases"][0]["processes"][0]["gpu_clocks"]
    assert RunResult.from_json(old).cases[0].processes[0].gpu_clocks is None


@pytest.mark.parametrize(("record", "message"), [
    ("1980 MHz", "cases[0].processes[0].gpu_clocks must be an object"),
    ({"sm_clock_mhz_before": -5}, "gpu_clocks.sm_clock_mhz_before must be a finite number >= 0"),
    ({"max_sm_clock_mhz": "max"}, "gpu_clocks.max_sm_clock_mhz must be a finite number"),
    ({"temperature_c": float("inf")}, "gpu_clocks.temperature_c must be a finite number"),
    ({"throttle_reasons_after": "hw_slowdown"}, "gpu_clocks.throttle_reasons_after must be an array"),
    ({"throttle_reasons_before": ["ok", 3]}, "gpu_clocks.throttle_reasons_before[1] must be a non-empty"),
    ({"throttle_reasons_before": ["bad\nname"]}, "gpu_clocks.throttle_reasons_before[0] must be a non-empty"),
    ({"error": 42}, "gpu_clocks.error must be a string"),
])
def test_clock_readings_are_untrusted_input(record, message):
    with pytest.raises(SchemaError, match=message.replace("[", r"\[").replace("]", r"\]")):
        RunResult.from_json(_results(_process(record)), source="results.json")


@pytest.mark.slow
def test_a_cpu_worker_records_no_gpu_clocks(tmp_path):
    """The real worker, in its own process, on a CPU case: the process result carries gpu_clocks None."""
    spec = CaseSpec("scaled_work", "smoke", ("eager",), "cpu", params=(("n", 8), ("reps", 1), ("steps", 1)))
    cfg = {"spec": spec.to_json(), "workload_file": str(REPO / "tests" / "workloads" / "scaled_work.py"),
           "timing": {"samples": 3, "max_time_s": 2.0}}
    (tmp_path / "case.json").write_text(json.dumps(cfg))
    subprocess.run([sys.executable, "-m", "perfgate.worker.main", "--case", str(tmp_path / "case.json"),
                    "--out", str(tmp_path / "out.json")], check=True, cwd=REPO, timeout=300)
    out = json.loads((tmp_path / "out.json").read_text())
    assert out["status"] == "ok", out
    assert out["process"]["gpu_clocks"] is None
    assert ProcessSamples.from_json(out["process"]).gpu_clocks is None


def test_a_real_gpu_reports_its_clocks():
    """On a CUDA machine with nvidia-ml-py: real readings around real work, no error."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("pynvml")
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    clocks = gpu_clocks.recorder_for("cuda:0")
    x = torch.randn(2048, 2048, device="cuda")
    m = measure(lambda: x @ x, timer_for("cuda"), samples=5, sync=torch.cuda.synchronize, around_samples=clocks.at)
    r = clocks.record()
    assert m.samples_ns and r["error"] is None, r
    assert 0 < r["sm_clock_mhz_before"] <= r["max_sm_clock_mhz"] and 0 < r["sm_clock_mhz_after"] <= r["max_sm_clock_mhz"]
    assert r["nvml_device"].startswith(("pci ", "index ", "uuid "))
    assert all(name in gpu_clocks.REASON_NAMES.values() for name in r["throttle_reasons_after"])


def test_the_real_nvidia_ml_py_without_a_gpu_driver_records_why():
    """nvidia-ml-py installed on a machine without NVIDIA's driver: NVML cannot start, and that is said."""
    pytest.importorskip("pynvml")
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU driver")
    clocks = gpu_clocks.recorder_for("cuda:0")
    clocks.at("before")
    clocks.at("after")
    r = clocks.record()
    assert r["sm_clock_mhz_after"] is None and r["error"].startswith("NVML did not initialise")
