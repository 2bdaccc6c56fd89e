"""GPU telemetry on the metrics timeline: NVML on this host, or a DCGM exporter's /metrics.

At each metrics poll instant the poller hands its run-clock time to a sampler, which appends
one line to telemetry.jsonl: {"t_ns", "source", "gpus": [{"index", "power_w", "energy_j",
"mem_used_mib", "sm_clock_mhz", "throttle"}], "error"}. A field a GPU or exporter does not
give is absent. Analysis (analysis/energy.py) reads the file offline.
"""

from __future__ import annotations

import asyncio
import importlib
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from loadgen.client.hostload import LOOPBACK
from loadgen.records import JsonlAppender

TELEMETRY_FILE = "telemetry.jsonl"
MIB = 1024 * 1024
# DCGM exporter field -> our per-GPU field, with the factor to our unit (W, J, MHz, MiB).
DCGM_FIELDS: dict[str, tuple[str, float]] = {
    "DCGM_FI_DEV_POWER_USAGE": ("power_w", 1.0),  # W
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": ("energy_j", 1e-3),  # mJ
    "DCGM_FI_DEV_SM_CLOCK": ("sm_clock_mhz", 1.0),  # MHz
    "DCGM_FI_DEV_FB_USED": ("mem_used_mib", 1.0),  # MiB
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": ("throttle", 1.0),  # bitmask
}
# One exporter scrape may take this long before the sample is an error line.
DCGM_TIMEOUT_S = 5.0


def is_loopback(url: str) -> bool:
    """True when the server at `url` runs on this host (so this host's GPUs serve it)."""
    return (urlparse(url).hostname or "") in LOOPBACK


def visible_devices(env: Mapping[str, str]) -> list[str] | None:
    """The GPUs CUDA_VISIBLE_DEVICES names (indices or GPU-/MIG- UUIDs), None when unset: the
    server loadgen launches inherits it, so these are the GPUs that serve."""
    raw = env.get("CUDA_VISIBLE_DEVICES")
    if raw is None:
        return None
    return [d.strip() for d in raw.split(",") if d.strip()]


class NvmlSampler:
    """Reads the GPUs of this host through pynvml (nvidia-ml-py), imported lazily: those
    `visible` names (CUDA_VISIBLE_DEVICES), else every one. Each sample names the GPU's NVML
    index: idle GPUs beside the server's would add their joules to its tokens."""

    source = "nvml"

    def __init__(self, nvml: Any, visible: list[str] | None = None) -> None:
        self._nvml = nvml
        nvml.nvmlInit()
        count = nvml.nvmlDeviceGetCount()
        if visible is None:
            self._handles = [(i, nvml.nvmlDeviceGetHandleByIndex(i)) for i in range(count)]
        else:
            self._handles = [self._device(d) for d in visible]

    def _device(self, name: str) -> tuple[int, Any]:
        nv = self._nvml
        if name.isdigit():
            return int(name), nv.nvmlDeviceGetHandleByIndex(int(name))
        h = nv.nvmlDeviceGetHandleByUUID(name)
        return int(nv.nvmlDeviceGetIndex(h)), h

    @property
    def gpus(self) -> int:
        return len(self._handles)

    async def sample(self) -> list[dict[str, Any]]:
        # NVML's calls block in the driver, and the sample is taken at each metrics poll on the
        # loop that times the streams: read them on a worker thread (ctypes lets go of the GIL).
        return await asyncio.to_thread(self._read)

    def _read(self) -> list[dict[str, Any]]:
        return [self._gpu(i, h) for i, h in self._handles]

    def _gpu(self, index: int, h: Any) -> dict[str, Any]:
        nv = self._nvml
        out: dict[str, Any] = {"index": index}
        reads: dict[str, Callable[[], float]] = {
            "power_w": lambda: nv.nvmlDeviceGetPowerUsage(h) / 1e3,  # mW
            "energy_j": lambda: nv.nvmlDeviceGetTotalEnergyConsumption(h) / 1e3,  # mJ
            "mem_used_mib": lambda: nv.nvmlDeviceGetMemoryInfo(h).used / MIB,  # bytes
            "sm_clock_mhz": lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM),
            "throttle": lambda: _throttle(nv, h),
        }
        for field, read in reads.items():
            try:  # a GPU without a counter (energy needs Volta+) just lacks that field
                out[field] = read()
            except Exception:
                continue
        return out


def _throttle(nv: Any, h: Any) -> int:
    # nvidia-ml-py renamed ClocksThrottleReasons to ClocksEventReasons; either works.
    read = (
        getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None)
        or nv.nvmlDeviceGetCurrentClocksThrottleReasons
    )
    return int(read(h))


def open_nvml(
    visible: list[str] | None = None,
) -> tuple[NvmlSampler | None, str | None]:
    """An NVML sampler of the `visible` GPUs (None: all), or None and the note why (no
    pynvml, no driver, no GPU, a CUDA_VISIBLE_DEVICES entry NVML does not know)."""
    try:
        nvml = importlib.import_module("pynvml")
    except ImportError:
        return None, "no GPU telemetry: pynvml is not installed (pip install 'loadgen[gpu]')"
    try:
        sampler = NvmlSampler(nvml, visible)
    except Exception as exc:
        return None, f"no GPU telemetry: NVML unavailable ({type(exc).__name__}: {exc})"
    if sampler.gpus == 0:
        return None, "no GPU telemetry: NVML found no GPU"
    return sampler, None


class DcgmSampler:
    """Scrapes a DCGM exporter's Prometheus text; one entry per `gpu` label."""

    source = "dcgm"

    def __init__(self, fetch: Callable[[], Awaitable[str]]) -> None:
        self._fetch = fetch

    async def sample(self) -> list[dict[str, Any]]:
        return parse_dcgm(await self._fetch())


def parse_dcgm(text: str) -> list[dict[str, Any]]:
    """Per-GPU telemetry fields from DCGM exporter exposition text."""
    gpus: dict[int, dict[str, Any]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            # The parser names a counter's sample NAME_total (TOTAL_ENERGY_CONSUMPTION is one).
            mapped = DCGM_FIELDS.get(s.name.removesuffix("_total"))
            if mapped is None:
                continue
            index = int(s.labels.get("gpu", "0"))
            field, factor = mapped
            value = s.value * factor
            gpus.setdefault(index, {"index": index})[field] = (
                int(value) if field == "throttle" else value
            )
    return [gpus[i] for i in sorted(gpus)]


class TelemetryLog:
    """Appends one sample per metrics poll instant to telemetry.jsonl, as it happens."""

    def __init__(self, sampler: NvmlSampler | DcgmSampler, log: JsonlAppender) -> None:
        self._sampler = sampler
        self._log = log
        self.source = sampler.source

    async def tick(self, t_ns: int) -> None:
        line: dict[str, Any] = {"t_ns": t_ns, "source": self._sampler.source}
        try:
            line["gpus"] = await self._sampler.sample()
        except Exception as exc:
            line["error"] = f"{type(exc).__name__}: {exc}"
        self._log.append(line)

    def close(self) -> None:
        self._log.close()


@asynccontextmanager
async def open_telemetry(
    run_path: Path, url: str | None, target_url: str, enabled: bool, notes: list[str]
) -> AsyncIterator[TelemetryLog | None]:
    """The run's telemetry log: DCGM at `url` when given; else NVML when the target is on this
    host (loopback) and `enabled`. Why there is none goes into `notes` (for run.json)."""
    if url is not None:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=DCGM_TIMEOUT_S)) as s:

            async def fetch() -> str:
                async with s.get(url) as resp:
                    resp.raise_for_status()
                    return await resp.text()

            with _logged(DcgmSampler(fetch), run_path) as log:
                yield log
        return
    sampler = None
    if enabled and is_loopback(target_url):
        visible = visible_devices(os.environ)
        sampler, note = open_nvml(visible)
        if note is not None:
            notes.append(note)
        elif sampler is not None and visible is None and sampler.gpus > 1:
            notes.append(
                f"energy sums all {sampler.gpus} GPUs of this host: set CUDA_VISIBLE_DEVICES "
                "to the server's GPUs to count only those"
            )
    elif enabled:
        notes.append(
            "no GPU telemetry: the server is not on this host (give --telemetry URL of its "
            "DCGM exporter's /metrics)"
        )
    if sampler is None:
        yield None
        return
    with _logged(sampler, run_path) as log:
        yield log


@contextmanager
def _logged(sampler: NvmlSampler | DcgmSampler, run_path: Path) -> Iterator[TelemetryLog]:
    """`sampler`'s log into the run's telemetry.jsonl, closed (its last line flushed) at the end."""
    log = TelemetryLog(sampler, JsonlAppender(run_path / TELEMETRY_FILE))
    try:
        yield log
    finally:
        log.close()
