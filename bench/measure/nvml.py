"""One GPU through NVML: found by the torch device's UUID (or PCI bus id), never by index; its clocks, power,
clock-event (throttle) reasons and total-energy counter.

NVML numbers the GPUs of the whole machine; torch numbers the ones CUDA_VISIBLE_DEVICES leaves it, in its order.
So torch's device 0 may be NVML's device 3, and an index lookup would read the wrong GPU. The UUID (the same
string in both, NVML with a "GPU-" prefix) or the PCI bus id names the same physical device in both.

Everything here answers None where NVML, the GPU or the driver lacks a reading: never an exception. Tests inject
a fake NVML module (`nv=`) and fake device properties (`props=`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# Clock-event reasons that mean "slowed down for power, heat or a hardware signal" (nvml.h's bits). Idle,
# application clocks, sync boost and display clocks are not throttling and are ignored.
THROTTLE_REASONS = {
    "sw_power_cap": 0x04,
    "hw_slowdown": 0x08,
    "sw_thermal_slowdown": 0x20,
    "hw_thermal_slowdown": 0x40,
    "hw_power_brake_slowdown": 0x80,
}
THROTTLE_MASK = sum(THROTTLE_REASONS.values())


def reason_names(bits: int | None) -> list[str]:
    """The throttling reasons set in an NVML clock-event bitmask, by name."""
    return [name for name, bit in THROTTLE_REASONS.items() if bits and bits & bit]


def _call(nv: Any, name: str, *args: Any) -> Any:
    """nv.<name>(*args); None where it is not supported (MIG, virtual GPUs, old drivers, an older nvidia-ml-py)."""
    return _try(getattr(nv, name, None), *args)


def _try(fn: Callable[..., Any] | None, *args: Any) -> Any:
    if fn is None:
        return None
    try:
        value = fn(*args)
    except Exception:
        return None
    return value.decode() if isinstance(value, bytes) else value


def load_nvml() -> Any:
    """The initialised pynvml module (nvidia-ml-py), or None without the library or a driver."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:
        return None
    return pynvml


def pci_bus_id(props: Any) -> str | None:
    """NVML's 'DDDDDDDD:BB:DD.0' form from torch's device properties (torch >= 2.5 has the PCI fields)."""
    ids = [getattr(props, f"pci_{k}_id", None) for k in ("domain", "bus", "device")]
    if any(not isinstance(x, int) for x in ids):
        return None
    return f"{ids[0]:08X}:{ids[1]:02X}:{ids[2]:02X}.0"


def torch_props(index: int) -> Any:
    import torch

    return torch.cuda.get_device_properties(index)


def find_handle(nv: Any, props: Any) -> Any:
    """NVML's handle of the device torch describes by `props`: by UUID, else by PCI bus id; None if neither works."""
    uuid = getattr(props, "uuid", None)
    if uuid is not None:
        text = str(uuid)
        handle = _call(nv, "nvmlDeviceGetHandleByUUID", text if text.startswith(("GPU-", "MIG-")) else f"GPU-{text}")
        if handle is not None:
            return handle
    bus = pci_bus_id(props)
    if bus is not None:
        return _call(nv, "nvmlDeviceGetHandleByPciBusId_v2", bus) or _call(nv, "nvmlDeviceGetHandleByPciBusId", bus)
    return None


@dataclass
class Gpu:
    """One GPU's NVML handle and the readings a case needs."""

    nv: Any
    handle: Any

    @classmethod
    def open(cls, index: int = 0, nv: Any = None, props: Any = None) -> Gpu | None:
        """The NVML view of torch's CUDA device `index`, or None (no NVML, no driver, no matching device)."""
        nv = nv if nv is not None else load_nvml()
        if nv is None:
            return None
        try:
            props = props if props is not None else torch_props(index)
        except Exception:
            return None
        handle = find_handle(nv, props)
        return cls(nv, handle) if handle is not None else None

    def name(self) -> str | None:
        return _call(self.nv, "nvmlDeviceGetName", self.handle)

    def clock_event_reasons(self) -> int | None:
        fn = getattr(self.nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
            getattr(self.nv, "nvmlDeviceGetCurrentClocksThrottleReasons", None)  # its name before CUDA 12
        return _try(fn, self.handle) if fn else None

    def throttled(self) -> bool:
        """Slowed down now for power, heat or a hardware signal (THROTTLE_REASONS)."""
        return bool((self.clock_event_reasons() or 0) & THROTTLE_MASK)

    def energy_mj(self) -> int | None:
        """Total energy since the driver loaded, millijoules (Volta and newer)."""
        return _call(self.nv, "nvmlDeviceGetTotalEnergyConsumption", self.handle)

    def reading(self) -> dict[str, Any]:
        """Clocks (current and max), power (and its limit), temperature, memory and clock-event reasons now."""
        nv, h = self.nv, self.handle
        sm, mem = getattr(nv, "NVML_CLOCK_SM", 1), getattr(nv, "NVML_CLOCK_MEM", 2)
        temperature = getattr(nv, "NVML_TEMPERATURE_GPU", 0)
        power_limit = _call(nv, "nvmlDeviceGetEnforcedPowerLimit", h)
        power = _call(nv, "nvmlDeviceGetPowerUsage", h)
        memory = _call(nv, "nvmlDeviceGetMemoryInfo", h)
        reasons = self.clock_event_reasons()
        return {
            "name": self.name(),
            "memory_bytes": getattr(memory, "total", None),
            "sm_clock_mhz": _call(nv, "nvmlDeviceGetClockInfo", h, sm),
            "mem_clock_mhz": _call(nv, "nvmlDeviceGetClockInfo", h, mem),
            "sm_clock_max_mhz": _call(nv, "nvmlDeviceGetMaxClockInfo", h, sm),
            "mem_clock_max_mhz": _call(nv, "nvmlDeviceGetMaxClockInfo", h, mem),
            "power_limit_w": power_limit / 1000 if power_limit is not None else None,
            "power_w": power / 1000 if power is not None else None,
            "temperature_c": _call(nv, "nvmlDeviceGetTemperature", h, temperature),
            "clock_event_reasons": reasons,
            "throttle_reasons": reason_names(reasons),
            "energy_mj": self.energy_mj(),
        }
