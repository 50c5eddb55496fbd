"""A CUDA process's GPU clocks around its timed samples, read through NVML (the ``pynvml`` module of
nvidia-ml-py, the optional ``gpu`` extra): the SM clock right before and right after the samples, the
maximum SM clock, the clocks-event ("throttle") reasons at both moments, and the temperature and power
draw after them. A process whose GPU slowed itself down for heat or power is set aside by the gate
(``perfgate.judging.compare.throttled``) the way a process slowed by the machine is; the report shows the clocks.

Reading clocks must never fail a case: every NVML call is guarded, and what could not be read is None
with the reason in ``error``. No pynvml (or a CPU case): no record at all (None).
"""

from __future__ import annotations

import importlib
import os
from typing import Any

# NVML's clocks-event reason bits (nvmlClocksEventReason*, formerly nvmlClocksThrottleReason*; the bit values
# are the same under both names), named in results.json in these words. A bit not listed here is
# kept as its hex value, so a newer driver's reason is still seen.
REASON_NAMES: dict[int, str] = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
    0x200: "board_limit",
    0x400: "reliability",
}


def reason_names(mask: int) -> list[str]:
    """The names of the reasons set in ``mask`` (REASON_NAMES; an unknown bit as ``0x...``), lowest bit first."""
    names, bit = [], 1
    while bit <= mask:
        if mask & bit:
            names.append(REASON_NAMES.get(bit, f"{bit:#x}"))
        bit <<= 1
    return names


def _short(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:200]


class ClockRecorder:
    """NVML readings of one GPU for one process: ``at("before")`` and ``at("after")`` the timed samples,
    then ``record()`` for results.json. ``nvml`` is the pynvml module (tests hand in their own)."""

    def __init__(self, nvml: Any, device_index: int) -> None:
        self.nvml = nvml
        self.errors: list[str] = []
        self.fields: dict[str, Any] = {
            "sm_clock_mhz_before": None, "sm_clock_mhz_after": None, "max_sm_clock_mhz": None,
            "throttle_reasons_before": None, "throttle_reasons_after": None,
            "temperature_c": None, "power_w": None, "nvml_device": None,
        }
        self.handle = None
        self.initialised = False
        try:
            nvml.nvmlInit()
            self.initialised = True
        except Exception as exc:  # noqa: BLE001 - no driver, no permission: say so, measure anyway
            self.errors.append(f"NVML did not initialise ({_short(exc)})")
            return
        self.handle, how = self._handle(device_index)
        self.fields["nvml_device"] = how
        if self.handle is not None:
            self._read("max_sm_clock_mhz", lambda: int(nvml.nvmlDeviceGetMaxClockInfo(self.handle, nvml.NVML_CLOCK_SM)))

    def _handle(self, device_index: int) -> tuple[Any, str | None]:
        """The NVML handle of torch's device ``device_index``: by its PCI bus id where torch tells it (NVML
        numbers devices in PCI order, CUDA by default fastest first, and CUDA_VISIBLE_DEVICES renumbers
        them), else by CUDA_VISIBLE_DEVICES' entry for it (an index or a UUID), else by the index itself."""
        tried: list[str] = []
        for how, get in self._lookups(device_index):
            try:
                return get(), how
            except Exception as exc:  # noqa: BLE001 - try the next way of naming the device
                tried.append(f"{how}: {_short(exc)}")
        self.errors.append(f"no NVML handle for cuda:{device_index} ({'; '.join(tried) or 'no way to name it'})")
        return None, None

    def _lookups(self, device_index: int) -> list[tuple[str, Any]]:
        nvml, out = self.nvml, []
        bus_id = _pci_bus_id(device_index)
        if bus_id:
            out.append((f"pci {bus_id}", lambda: nvml.nvmlDeviceGetHandleByPciBusId(bus_id)))
        visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
        if "CUDA_VISIBLE_DEVICES" in os.environ and device_index < len(visible):
            entry = visible[device_index]
            if entry.isdigit():
                out.append((f"index {entry} (CUDA_VISIBLE_DEVICES)", lambda: nvml.nvmlDeviceGetHandleByIndex(int(entry))))
            else:
                out.append((f"uuid {entry} (CUDA_VISIBLE_DEVICES)", lambda: nvml.nvmlDeviceGetHandleByUUID(entry)))
        else:
            out.append((f"index {device_index}", lambda: nvml.nvmlDeviceGetHandleByIndex(device_index)))
        return out

    def _read(self, key: str, get: Any) -> None:
        try:
            self.fields[key] = get()
        except Exception as exc:  # noqa: BLE001 - one missing reading (not supported here) leaves the rest
            self.errors.append(f"{key}: {_short(exc)}")

    def _reasons(self) -> list[str]:
        # nvmlDeviceGetCurrentClocksEventReasons since driver 535; the Throttle name before it (deprecated)
        get = (getattr(self.nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
               or self.nvml.nvmlDeviceGetCurrentClocksThrottleReasons)
        return reason_names(int(get(self.handle)))

    def _sample(self, when: str) -> None:
        if self.handle is None:
            return
        nvml = self.nvml
        self._read(f"sm_clock_mhz_{when}", lambda: int(nvml.nvmlDeviceGetClockInfo(self.handle, nvml.NVML_CLOCK_SM)))
        self._read(f"throttle_reasons_{when}", self._reasons)

    def at(self, when: str) -> None:
        """Read the clocks ``when`` is "before" or "after" the timed samples (``measure``'s
        ``around_samples``); after them also the temperature and power draw, then let NVML go."""
        self._sample(when)
        if when == "after":
            if self.handle is not None:
                nvml = self.nvml
                self._read("temperature_c",
                           lambda: int(nvml.nvmlDeviceGetTemperature(self.handle, nvml.NVML_TEMPERATURE_GPU)))
                self._read("power_w", lambda: round(nvml.nvmlDeviceGetPowerUsage(self.handle) / 1000.0, 1))  # mW
            self.close()

    def close(self) -> None:
        if self.initialised:
            self.initialised = False
            try:
                self.nvml.nvmlShutdown()
            except Exception:  # noqa: BLE001,S110 - nothing left to read; a failed shutdown changes nothing
                pass

    def record(self) -> dict[str, Any]:
        """The readings for results.json (``ProcessSamples.gpu_clocks``): None where not read, ``error``
        saying why (None when everything was read)."""
        return {**self.fields, "error": "; ".join(self.errors) or None}


def _pci_bus_id(device_index: int) -> str | None:
    """``domain:bus:device.0`` of torch's CUDA device ``device_index`` (NVML's PCI bus id format), or None
    where this torch's device properties do not carry it."""
    try:
        import torch

        props = torch.cuda.get_device_properties(device_index)
        domain, bus, device = props.pci_domain_id, props.pci_bus_id, props.pci_device_id  # type: ignore[attr-defined]  # newer torch; AttributeError handled
        return f"{int(domain):08X}:{int(bus):02X}:{int(device):02X}.0"
    except Exception:  # noqa: BLE001 - an older torch, a CPU build: other ways of naming the device
        return None


def recorder_for(device: str) -> ClockRecorder | None:
    """A ClockRecorder for a case on ``device`` ("cuda", "cuda:1"), or None on a CPU device or where pynvml
    (nvidia-ml-py) is not importable."""
    if not device.startswith("cuda"):
        return None
    try:
        nvml = importlib.import_module("pynvml")
    except Exception:  # noqa: BLE001 - not installed, or broken: no clocks, the case runs as before
        return None
    _, _, index = device.partition(":")
    if not index:
        try:
            import torch

            index = str(torch.cuda.current_device())
        except Exception:  # noqa: BLE001
            index = "0"
    return ClockRecorder(nvml, int(index) if index.isdigit() else 0)


def other_gpu_processes(device: str) -> dict[str, Any] | None:
    """Other processes NVML sees running on the case's GPU (compute and graphics), right before timing:
    ``{"other_processes": N, "pids": [...], "error": None}``; None on a CPU device or without pynvml. NVML
    names processes by the host's pids, which a container's worker may not see as its own: where the list
    lacks this process's pid, one entry is taken to be the worker's."""
    if not device.startswith("cuda"):
        return None
    try:
        nvml = importlib.import_module("pynvml")
    except Exception:  # noqa: BLE001 - not installed, or broken: nothing recorded
        return None
    _, _, index = device.partition(":")
    recorder = ClockRecorder(nvml, int(index) if index.isdigit() else 0)
    out: dict[str, Any] = {"other_processes": None, "pids": None, "error": None}
    try:
        if recorder.handle is None:
            out["error"] = "; ".join(recorder.errors) or "no NVML handle"
            return out
        pids: set[int] = set()
        for name in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
            get = getattr(nvml, name, None)
            if get is not None:
                pids.update(int(p.pid) for p in get(recorder.handle))
        own = os.getpid()
        others = sorted(pids - {own})
        out["pids"] = others[:20]
        out["other_processes"] = len(others) - (1 if others and own not in pids else 0)
    except Exception as exc:  # noqa: BLE001 - never fails a case
        out["error"] = _short(exc)
    finally:
        recorder.close()
    return out
