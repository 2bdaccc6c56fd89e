"""GPU telemetry: NVML against a fake pynvml, DCGM against a recorded exposition on loopback,
energy per output token from telemetry.jsonl, and the notes when there is none."""

from __future__ import annotations

import sys
import threading
import time
import types
from pathlib import Path

import orjson
import pytest
from aiohttp import web
from click.testing import CliRunner

from loadgen.analysis.energy import Energy, EnergyNote, energy_section, read_energy
from loadgen.analysis.summary import analyze_run
from loadgen.cli import main
from loadgen.codec import from_json, to_json
from loadgen.engine.run import RunOptions, run_plan
from loadgen.engine.telemetry import (
    is_loopback,
    open_nvml,
    open_telemetry,
    parse_dcgm,
    visible_devices,
)
from loadgen.records import JsonlAppender, read_jsonl, read_metrics
from loadgen.report.cmd import write_report
from loadgen.scenario.load import load_scenario
from loadgen.scenario.plan import plan
from loadgen.sim.server import start_sim_server

from support.run_fixtures import ns, stream, sweep_arm, write_run
from support.sim import SMALL, run_against, small_sim_config
from support.virtual import run_virtual

WATTS = 300.0  # the fake GPU's constant draw: its energy counter rises 300 J per second

# A DCGM exporter's exposition as it serves it (names from etc/default-counters.csv).
DCGM_TEXT = """\
# HELP DCGM_FI_DEV_SM_CLOCK SM clock frequency (in MHz).
# TYPE DCGM_FI_DEV_SM_CLOCK gauge
DCGM_FI_DEV_SM_CLOCK{gpu="0",UUID="GPU-a",modelName="NVIDIA H200"} 1980
DCGM_FI_DEV_SM_CLOCK{gpu="1",UUID="GPU-b",modelName="NVIDIA H200"} 1755
# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).
# TYPE DCGM_FI_DEV_FB_USED gauge
DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-a",modelName="NVIDIA H200"} 130000
DCGM_FI_DEV_FB_USED{gpu="1",UUID="GPU-b",modelName="NVIDIA H200"} 64000
# HELP DCGM_FI_DEV_POWER_USAGE Power draw (in W).
# TYPE DCGM_FI_DEV_POWER_USAGE gauge
DCGM_FI_DEV_POWER_USAGE{gpu="0",UUID="GPU-a",modelName="NVIDIA H200"} 612.5
DCGM_FI_DEV_POWER_USAGE{gpu="1",UUID="GPU-b",modelName="NVIDIA H200"} 88.25
# HELP DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION Total energy consumption since boot (in mJ).
# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter
DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{gpu="0",UUID="GPU-a",modelName="NVIDIA H200"} 9000000
DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{gpu="1",UUID="GPU-b",modelName="NVIDIA H200"} 4000000
# HELP DCGM_FI_DEV_CLOCK_THROTTLE_REASONS Current clock throttle reasons.
# TYPE DCGM_FI_DEV_CLOCK_THROTTLE_REASONS gauge
DCGM_FI_DEV_CLOCK_THROTTLE_REASONS{gpu="0",UUID="GPU-a",modelName="NVIDIA H200"} 4
DCGM_FI_DEV_CLOCK_THROTTLE_REASONS{gpu="1",UUID="GPU-b",modelName="NVIDIA H200"} 0
"""


def fake_pynvml(gpus: int = 1, *, energy: bool = True) -> types.ModuleType:
    """pynvml's calls as nvidia-ml-py names them; energy rises WATTS J/s of perf_counter."""
    t0 = time.perf_counter_ns()
    m = types.ModuleType("pynvml")
    m.NVML_CLOCK_SM = 1
    m.nvmlInit = lambda: None
    m.nvmlDeviceGetCount = lambda: gpus
    m.nvmlDeviceGetHandleByIndex = lambda i: i
    m.nvmlDeviceGetPowerUsage = lambda h: int(WATTS * 1000)  # mW
    if energy:
        m.nvmlDeviceGetTotalEnergyConsumption = lambda h: (
            (time.perf_counter_ns() - t0) * WATTS / 1e6  # mJ
        )
    m.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(used=2048 * 1024 * 1024)
    m.nvmlDeviceGetClockInfo = lambda h, clock: 1980 if clock == m.NVML_CLOCK_SM else 0
    m.nvmlDeviceGetCurrentClocksThrottleReasons = lambda h: 0x4  # sw_power_cap
    return m


def line(t: float, **gpu: float) -> dict:
    return {"t_ns": ns(t), "source": "nvml", "gpus": [{"index": 0, **gpu}]}


# --- analysis: exact joules on synthesized samples -------------------------------------


def test_energy_counter_is_read_at_the_window_edges_exactly():
    # Window: intended 0.5 s -> done 3.0 s = 2.5 s; samples every second, counter 300 J/s.
    streams = [
        stream("a", chunks=[1.0, 2.0], tokens=[10, 15], intended=0.5, sent=0.5, done=3.0),
        stream("b", chunks=[1.5], tokens=[25], intended=0.5, sent=0.5, done=2.0),
    ]
    lines = [line(t, energy_j=1000 + WATTS * t, power_w=WATTS, sm_clock_mhz=1500 + t,
                  throttle=0x1 if t == 2 else 0) for t in (0, 1, 2, 3, 4)]  # fmt: skip
    e = energy_section(lines, streams, (ns(0.5), ns(3.0)))
    assert e is not None and e.available
    assert e.energy_method == "energy_counter"
    assert e.energy_j == pytest.approx(750.0, abs=1e-9)
    assert e.output_tokens == 50
    assert e.j_per_output_token == pytest.approx(15.0, abs=1e-12)
    assert e.mean_power_w == pytest.approx(WATTS)
    assert e.peak_sm_clock_mhz == 1503  # the 4 s sample lies outside the window
    assert e.throttle_reasons == ["gpu_idle"]
    # summary.json holds the derived figures beside the measured ones, and reads back the same.
    assert to_json(e)["j_per_output_token"] == pytest.approx(15.0, abs=1e-12)
    assert "note" not in to_json(e) and read_energy(to_json(e)) == e


def test_joules_per_prompt_and_per_total_token_stand_beside_per_output_token():
    # A prefill-heavy window (whale_c4 on the H200: 85k prompt tokens per 1k output read 4.58
    # J per output token): 750 J over 1,200 prompt and 50 output tokens, all from usage.
    streams = [
        stream("a", chunks=[1.0, 2.0], tokens=[10, 15], prompt=1000, sent=0.5, done=3.0),
        stream("b", chunks=[1.5], tokens=[25], prompt=200, sent=0.5, done=2.0),
    ]
    lines = [line(t, energy_j=1000 + WATTS * t) for t in (0, 1, 2, 3, 4)]
    e = energy_section(lines, streams, (ns(0.5), ns(3.0)))
    assert e is not None
    assert (e.prompt_tokens, e.output_tokens, e.prompt_tokens_missing) == (1200, 50, 0)
    assert e.j_per_output_token == pytest.approx(15.0, abs=1e-12)
    assert e.j_per_prompt_token == pytest.approx(0.625, abs=1e-12)
    assert e.j_per_total_token == pytest.approx(0.6, abs=1e-12)
    block = to_json(e)
    assert (block["prompt_tokens"], block["prompt_tokens_missing"]) == (1200, 0)
    assert block["j_per_prompt_token"] == pytest.approx(0.625, abs=1e-12)
    assert block["j_per_total_token"] == pytest.approx(0.6, abs=1e-12)
    assert from_json(Energy, block) == e
    from loadgen.report.sections import energy_table

    table = energy_table({"energy": block})
    assert table is not None
    assert table.columns == ("source", "GPUs", "energy J", "prompt tokens", "output tokens",
                             "J/prompt tok", "J/output tok", "J/total tok", "mean W",
                             "peak SM MHz", "throttle reasons")  # fmt: skip
    assert table.rows == (
        ("nvml", "1", "750.0", "1200", "50", "0.6250", "15.0000", "0.6000", "300.0", "-",
         "none"),
    )  # fmt: skip
    assert table.notes == (
        "energy from the energy counter over 2.5 s, all GPUs; output tokens from "
        "usage_continuous, prompt tokens from the server's usage (prompt_tokens); "
        "J/total tok: over prompt + output tokens",
    )


def test_a_stream_without_usage_prompt_tokens_leaves_joules_per_prompt_token_unknown():
    streams = [
        stream("a", chunks=[1.0], tokens=[20], prompt=1000, done=2.0),
        stream("b", chunks=[1.0], tokens=[20], prompt=None, done=2.0),
    ]
    lines = [line(t, energy_j=WATTS * t) for t in (0, 1, 2)]
    e = energy_section(lines, streams, (ns(0.0), ns(2.0)))
    assert e is not None
    assert (e.prompt_tokens, e.prompt_tokens_missing) == (1000, 1)
    assert e.j_per_output_token == pytest.approx(15.0)
    assert e.j_per_prompt_token is None and e.j_per_total_token is None
    from loadgen.report.sections import energy_table

    table = energy_table({"energy": to_json(e)})
    assert table is not None
    assert table.rows[0][3:8] == ("-", "40", "-", "15.0000", "-")
    assert table.notes[0].endswith(
        "prompt tokens unknown: 1 of 2 streams had no usage prompt_tokens"
    )


def test_power_is_integrated_where_no_energy_counter_and_the_method_says_so():
    streams = [stream("a", chunks=[1.0], tokens=[20], intended=0.0, sent=0.0, done=2.0)]
    # Power ramps 100 -> 300 W over 2 s: 400 J by trapezoids.
    lines = [line(t, power_w=100 + 100 * t) for t in (0, 1, 2)]
    e = energy_section(lines, streams, (ns(0.0), ns(2.0)))
    assert e is not None
    assert e.energy_method == "power_integrated"
    assert e.energy_j == pytest.approx(400.0)
    assert e.j_per_output_token == pytest.approx(20.0)
    assert e.throttle_reasons == []


def test_no_telemetry_lines_is_no_energy_section():
    streams = [stream("a", chunks=[1.0])]
    assert energy_section([], streams, (0, ns(1))) is None
    assert energy_section([{"t_ns": 0, "source": "nvml", "error": "x"}], streams, (0, 1)) is None


def test_telemetry_without_a_window_or_a_counter_says_why_and_reads_back():
    lines = [line(t, sm_clock_mhz=1500) for t in (0, 1)]
    streams = [stream("a", chunks=[1.0])]
    unmeasured = energy_section(lines, streams, None)
    assert unmeasured == EnergyNote(lines[0]["source"], False, "no measured streams")
    blind = energy_section(lines, streams, (0, ns(1)))
    assert blind is not None and blind.note == "no energy counter or power"
    assert to_json(blind) == {"source": lines[0]["source"], "available": False,
                              "note": "no energy counter or power"}  # fmt: skip
    assert read_energy(to_json(blind)) == blind


def test_report_table_only_when_telemetry_exists(tmp_path: Path):
    streams = [stream("a", chunks=[1.0, 2.0], tokens=[10, 10], intended=0.0, sent=0.0, done=2.0)]
    with_gpu = write_run(tmp_path / "gpu", streams)
    log = JsonlAppender(with_gpu / "telemetry.jsonl")
    for t in (0, 1, 2):
        log.append(line(t, energy_j=WATTS * t, power_w=WATTS, throttle=0x4))
    log.close()
    write_report(with_gpu)
    summary = orjson.loads((with_gpu / "summary.json").read_bytes())
    assert summary["energy"]["j_per_output_token"] == pytest.approx(30.0)
    assert "GPU energy (measured window)" in (with_gpu / "report.txt").read_text()
    assert "sw_power_cap" in (with_gpu / "report.txt").read_text()
    without = write_run(tmp_path / "plain", streams)
    write_report(without)
    assert "GPU energy" not in (without / "report.txt").read_text()
    assert orjson.loads((without / "summary.json").read_bytes())["energy"] is None


# --- NVML on a wall-clock sim run ------------------------------------------------------


async def test_nvml_samples_land_on_the_metrics_instants_and_give_joules_per_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(gpus=2))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    async with start_sim_server(small_sim_config()) as sim:
        run_dir = await run_against(sim, "whale_c4", tmp_path, ["metrics.poll_interval_s=0.05"])
    tele = list(read_jsonl(run_dir / "telemetry.jsonl"))
    assert [t["t_ns"] for t in tele] == [m.t_ns for m in read_metrics(run_dir)]
    assert {len(t["gpus"]) for t in tele} == {2}
    assert tele[0]["gpus"][0]["power_w"] == WATTS
    assert tele[0]["gpus"][0]["mem_used_mib"] == 2048
    manifest = orjson.loads((run_dir / "run.json").read_bytes())
    summed = ("energy sums all 2 GPUs of this host: set CUDA_VISIBLE_DEVICES to the server's "
              "GPUs to count only those")  # fmt: skip
    assert manifest["telemetry"] == {"source": "nvml", "notes": [summed]}
    e = analyze_run(run_dir).summary["energy"]
    assert e["energy_method"] == "energy_counter"
    # The counter is read on a worker thread just after each stamp, so 2 GPUs x 300 J/s x
    # window holds to the thread's start-up skew at the two edges (1.4 ms measured on a busy
    # 2-core box; 20 ms of skew is 12 J); joules per token is exactly energy over the tokens.
    assert e["energy_j"] == pytest.approx(2 * WATTS * e["window_s"], abs=2 * WATTS * 0.02)
    assert e["output_tokens"] == 4 * 32
    # summary.json keeps 9 significant digits
    assert e["j_per_output_token"] == pytest.approx(e["energy_j"] / 128, rel=1e-8)
    assert e["peak_sm_clock_mhz"] == 1980
    assert e["throttle_reasons"] == ["sw_power_cap"]


async def test_nvml_is_read_off_the_loop_that_times_the_streams(monkeypatch: pytest.MonkeyPatch):
    nv = fake_pynvml()
    readers: list[int] = []
    power = nv.nvmlDeviceGetPowerUsage
    nv.nvmlDeviceGetPowerUsage = lambda h: readers.append(threading.get_ident()) or power(h)
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    sampler, note = open_nvml()
    assert sampler is not None and note is None
    gpus = await sampler.sample()
    assert gpus[0]["power_w"] == WATTS
    assert readers and threading.get_ident() not in readers


async def test_missing_nvml_is_a_note_and_the_run_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    async with start_sim_server(small_sim_config()) as sim:
        run_dir = await run_against(sim, "whale_c4", tmp_path)
    assert not (run_dir / "telemetry.jsonl").exists()
    notes = orjson.loads((run_dir / "run.json").read_bytes())["telemetry"]["notes"]
    note = "no GPU telemetry: pynvml is not installed (pip install 'loadgen[gpu]')"
    assert notes == [note]
    write_report(run_dir)
    assert note in (run_dir / "report.txt").read_text()


def test_nvml_without_gpus_or_driver_is_a_note(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(gpus=0))
    assert open_nvml() == (None, "no GPU telemetry: NVML found no GPU")
    no_driver = fake_pynvml()

    def fail() -> None:
        raise OSError("NVML Shared Library Not Found")

    no_driver.nvmlInit = fail
    monkeypatch.setitem(sys.modules, "pynvml", no_driver)
    assert open_nvml() == (
        None, "no GPU telemetry: NVML unavailable (OSError: NVML Shared Library Not Found)"
    )  # fmt: skip
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(gpus=1))
    sampler, note = open_nvml()
    assert sampler is not None and note is None


async def test_no_telemetry_turns_nvml_off_with_no_note(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml())
    async with start_sim_server(small_sim_config()) as sim:
        scenario = load_scenario("whale_c4", [*SMALL, "groups.minnows.count=1"])
        opts = RunOptions(base_url=sim.url, out_root=tmp_path, progress=False, telemetry=False)
        run_dir = await run_plan(plan(scenario), opts, warn=lambda m: None)
    assert not (run_dir / "telemetry.jsonl").exists()
    assert orjson.loads((run_dir / "run.json").read_bytes())["telemetry"] == {
        "source": None, "notes": []
    }  # fmt: skip


async def test_a_remote_server_is_not_sampled_through_this_hosts_nvml(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml())
    notes: list[str] = []
    async with open_telemetry(tmp_path, None, "http://10.0.0.7:8000", True, notes) as log:
        assert log is None
    assert notes == [
        "no GPU telemetry: the server is not on this host (give --telemetry URL of its "
        "DCGM exporter's /metrics)"
    ]
    notes.clear()
    async with open_telemetry(tmp_path, None, "http://127.0.0.1:8000", True, notes) as log:
        assert log is not None and log.source == "nvml"
    assert notes == []
    async with open_telemetry(tmp_path, None, "http://10.0.0.7:8000", False, notes) as log:
        assert log is None
    assert notes == []


def test_loopback_decides_where_nvml_is_sampled():
    assert is_loopback("http://127.0.0.1:8000/v1")
    assert is_loopback("http://localhost:8000")
    assert not is_loopback("http://10.0.0.7:8000/v1")
    assert not is_loopback("https://api.example.com")


# --- DCGM exporter over loopback -------------------------------------------------------


def test_dcgm_exposition_parses_into_per_gpu_fields():
    assert parse_dcgm(DCGM_TEXT) == [
        {"index": 0, "sm_clock_mhz": 1980, "mem_used_mib": 130000, "power_w": 612.5,
         "energy_j": 9000.0, "throttle": 4},
        {"index": 1, "sm_clock_mhz": 1755, "mem_used_mib": 64000, "power_w": 88.25,
         "energy_j": 4000.0, "throttle": 0},
    ]  # fmt: skip


async def test_dcgm_exporter_is_scraped_on_the_metrics_instants(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml())  # DCGM wins over NVML
    app = web.Application()

    async def exporter(_request: web.Request) -> web.Response:
        return web.Response(text=DCGM_TEXT)

    app.router.add_get("/metrics", exporter)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    try:
        async with start_sim_server(small_sim_config()) as sim:
            scenario = load_scenario("whale_c4", [*SMALL, "groups.minnows.count=1"])
            opts = RunOptions(
                base_url=sim.url, out_root=tmp_path, progress=False,
                telemetry_url=f"http://127.0.0.1:{port}/metrics",
            )  # fmt: skip
            run_dir = await run_plan(plan(scenario), opts, warn=lambda m: None)
    finally:
        await runner.cleanup()
    tele = list(read_jsonl(run_dir / "telemetry.jsonl"))
    assert [t["t_ns"] for t in tele] == [m.t_ns for m in read_metrics(run_dir)]
    assert {t["source"] for t in tele} == {"dcgm"}
    assert tele[-1]["gpus"] == parse_dcgm(DCGM_TEXT)
    e = analyze_run(run_dir).summary["energy"]
    assert e["energy_j"] == 0.0  # the recorded counter stands still
    assert e["peak_sm_clock_mhz"] == 1980
    assert e["throttle_reasons"] == ["sw_power_cap"]


# --- the virtual clock has no GPU ------------------------------------------------------


async def test_virtual_clock_samples_no_telemetry_and_notes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml())
    run = await run_virtual("whale_c4", [], tmp_path)
    assert not (run.run_dir / "telemetry.jsonl").exists()
    assert run.summary["energy"] is None and run.summary["telemetry_notes"] == []


def test_telemetry_url_on_the_virtual_clock_is_a_usage_error(tmp_path: Path):
    for cmd in (["run", "whale_c4"], ["soak", "whale_c4"]):
        url = "http://127.0.0.1:9400/metrics"
        args = [*cmd, "--clock", "virtual", "--telemetry", url, "--out", str(tmp_path)]
        res = CliRunner().invoke(main, args)
        assert res.exit_code == 2
        assert "--clock virtual runs no real GPU: drop --telemetry" in res.output


def test_the_sweep_report_sets_joules_per_token_of_its_arms_side_by_side() -> None:
    from loadgen.analysis.sweep_types import read_sweep
    from loadgen.report.sweep_text import arms_energy_table

    def energy(joules: float, window_s: float, throttle: int) -> dict:
        e = Energy("nvml", True, gpus=1, energy_method="energy_counter", window_s=window_s,
                   energy_j=joules, output_tokens=2000, prompt_tokens=170_000,
                   token_sources=("usage",), peak_sm_clock_mhz=1980,
                   throttle_mask=throttle)  # fmt: skip
        return to_json(e)

    arms = {
        "max_num_batched_tokens=512": sweep_arm(energy=energy(9434.0, 15.0, 0)),
        "max_num_batched_tokens=2048": sweep_arm(energy=energy(8694.0, 14.0, 0x4)),
        "cold": sweep_arm(),
    }
    order = ["max_num_batched_tokens=512", "max_num_batched_tokens=2048", "cold"]
    table = arms_energy_table(read_sweep({"arms": arms, "arm_order": order}))
    assert table is not None
    # J / output token = 9434 J / 2000 tokens, J / total token = 9434 J / (170000 + 2000)
    # tokens; mean W = 9434 J / 15 s.
    assert table.columns == ("arm", "J / output token", "J / prompt token", "J / total token",
                             "energy J", "output tokens", "mean W", "peak SM MHz",
                             "throttle reasons")  # fmt: skip
    assert table.rows == (
        ("max_num_batched_tokens=512", "4.717", "0.05549", "0.05485", "9434", "2000", "629",
         "1980", "none"),
        ("max_num_batched_tokens=2048", "4.347", "0.05114", "0.05055", "8694", "2000", "621",
         "1980", "sw_power_cap"),
    )  # fmt: skip
    assert table.notes[0] == (
        "prompt tokens from the server's usage (prompt_tokens), output tokens from each arm's "
        "token source; total = prompt + output; lower J / token is better at equal tokens; "
        "throttling makes arms unequal"
    )
    assert arms_energy_table(read_sweep({"arms": {"cold": sweep_arm()}})) is None


async def test_only_the_gpus_cuda_visible_devices_names_are_sampled(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    nv = fake_pynvml(gpus=4)
    nv.nvmlDeviceGetHandleByUUID = lambda uuid: {"GPU-b": 1, "GPU-d": 3}[uuid]
    nv.nvmlDeviceGetIndex = lambda h: h
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    assert visible_devices({}) is None
    assert visible_devices({"CUDA_VISIBLE_DEVICES": "2, 0"}) == ["2", "0"]
    sampler, note = open_nvml(visible_devices({"CUDA_VISIBLE_DEVICES": "2"}))
    assert note is None and sampler is not None
    assert [g["index"] for g in await sampler.sample()] == [2]
    sampler, _ = open_nvml(["GPU-d", "GPU-b"])
    assert sampler is not None and [g["index"] for g in await sampler.sample()] == [3, 1]
    sampler, _ = open_nvml(None)
    assert sampler is not None and [g["index"] for g in await sampler.sample()] == [0, 1, 2, 3]
    assert open_nvml(["GPU-x"])[0] is None  # an unknown UUID is a note, not a crash
