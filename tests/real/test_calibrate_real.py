"""`loadgen calibrate` on vLLM's CPU build and on llama-server with the tiny model, then
`loadgen fidelity` of the fitted profile on whale, ladder and politeness at the CPU's scale
(tests/data/scenarios/fidelity_*.yaml).

The calibration boots vLLM twice (budget 512, then 128 for the cold prefills).
What is asserted is what must hold whatever the machine's speed: the calibration drives the
server within its bounds and fits it (the fit's own residuals), the profile carries the limits
the server stated (boot log), and the fidelity table is complete and honest (each figure's
mark agrees with its error, every arm of the real run, each boot, meets its prediction). How
close the virtual clock comes is measured, printed and kept in the summary; the 15% target is
reported, not asserted (on this CPU the whale's TTFT came within -19.5%, the minnows' within
-23%: profiles/README.md). What is asserted of closeness is a bound that a wrong profile
fails: a profile three times too slow is off by -67%, outside the -50%..+100% the whale's TTFT
must meet."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from loadgen.sim.profile_file import load_profile_file

from support.paths import DATA
from support.real import note, tiny_model

pytestmark = pytest.mark.real

SCENARIOS = DATA / "scenarios"
VLLM_FLAGS = ("--max-num-seqs", "4", "--max-num-batched-tokens", "512", "--max-model-len", "8192")
TOLERANCE = 0.15


def _loadgen(*args: str | Path, timeout_s: float = 900) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "loadgen", *map(str, args)],
        capture_output=True, text=True, timeout=timeout_s,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def _server_args(kind: str, flags: tuple[str, ...]) -> list[str]:
    out = ["--server", kind, "--model-path", str(tiny_model(kind))]
    return out + [f"--server-arg={f}" for f in flags]


def _calibrate(tmp_path: Path, kind: str, flags: tuple[str, ...], *bounds: str) -> Path:
    profile = tmp_path / f"{kind}.yaml"
    _loadgen("calibrate", *_server_args(kind, flags), "--out", tmp_path / "cal",
             "--profile-out", profile, "--name", f"{kind}-cpu-tiny", *bounds)  # fmt: skip
    fitted = load_profile_file(profile)
    costs = ", ".join(f"{k} {v:.3g}" for k, v in fitted.costs().items() if v is not None)
    fit = fitted.fit
    note(f"{kind} calibration", f"rms {fit['rms_error']:.1%}, max {fit['max_error']:.1%} over "
         f"{fit['measurements']} points; {costs}")  # fmt: skip
    return profile


def _fidelity(tmp_path: Path, kind: str, flags: tuple[str, ...], scenario: str,
              profile: Path) -> dict:  # fmt: skip
    out = tmp_path / f"fid-{scenario}"
    _loadgen("fidelity", SCENARIOS / f"{scenario}.yaml", "--sim-profile", profile,
             *_server_args(kind, flags), "--out", out, "--seed", "7")  # fmt: skip
    [root] = list(out.iterdir())
    table = orjson.loads((root / "fidelity.json").read_bytes())
    assert (root / "fidelity.png").stat().st_size > 0
    assert table["unmatched"] == [] and table["figures"] > 0, table
    for r in table["rows"]:
        if r["error"] is not None:
            assert r["within"] == (abs(r["error"]) <= TOLERANCE), r
        note(f"{kind} fidelity {scenario} {r['arm']} {r['group']} {r['label']}",
             f"measured {r['measured']}, predicted {r['predicted']}, error "
             + ("-" if r["error"] is None else f"{r['error']:+.1%}"))  # fmt: skip
    note(f"{kind} fidelity {scenario}", f"{table['within']} of {table['figures']} figures "
         f"within ±15%; verdicts the same in {table['verdicts_agree']} of "
         f"{len(table['verdicts'])} groups")  # fmt: skip
    return table


def _rows(table: dict, group: str, metric: str) -> list[dict]:
    """One row per boot of the arm."""
    return [r for r in table["rows"] if r["group"] == group and r["metric"] == metric]


def _arms(table: dict) -> set[str]:
    """The arms compared, each boot's run folded into its arm."""
    return {r["arm"].rpartition(".boot")[0] or r["arm"] for r in table["rows"]}


@pytest.fixture(scope="module")
def vllm_profile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _calibrate(tmp_path_factory.mktemp("cal-vllm"), "vllm", VLLM_FLAGS)


def test_vllm_calibration_fits_and_carries_the_boot_logs_limits(vllm_profile: Path) -> None:
    fitted = load_profile_file(vllm_profile)
    # Two boots: the flags' budget, then a quarter of it for the cold prefills, so a prefill
    # step's cost and a prefill token's are measured apart.
    assert [b["max_num_batched_tokens"] for b in fitted.fitted_boots] == [512, 128]
    assert not {"fixed_s", "per_token_s"} & set(fitted.unseparated), fitted.unseparated
    note("vllm calibration boots", f"{fitted.fitted_boots}; unseparated {fitted.unseparated}")
    assert fitted.facts["max_num_seqs"] == 4
    assert fitted.facts["max_num_batched_tokens"] == 512
    assert fitted.facts["block_size"] == 32  # vLLM's CPU build pages in 32-token blocks
    assert fitted.facts["num_speculative_tokens"] == 0
    assert fitted.fitted_on["server"] == "vllm"
    # Under 0.15 on an idle box; 0.159 on a 2-core box running another suite beside it.
    assert fitted.fit["rms_error"] < 0.2, fitted.fit
    # vLLM's TTFT histogram stands beside the client's timing: the client sees each first
    # token later, by the HTTP path.
    witness = fitted.fit["server_witness"]
    assert witness and all(w["client_ttft_mean_s"] > w["server_ttft_mean_s"] for w in witness)


def test_vllm_fidelity_whale(vllm_profile: Path, tmp_path: Path) -> None:
    table = _fidelity(tmp_path, "vllm", VLLM_FLAGS, "fidelity_whale", vllm_profile)
    whale = _rows(table, "whale", "ttft_median_s")
    # Within a factor the server's own spread allows: measured -13.9%, -19.5% and, in a CI run
    # on a loaded 2-core machine, -35.9%; a profile three times too slow is off by -67%.
    assert whale and all(-0.5 < r["error"] < 1.0 for r in whale), whale
    # The minnows wait behind the whale's prefill on both sides, on every boot.
    minnows = [v for v in table["verdicts"] if v["group"] == "minnows"]
    assert minnows and all(v["real"].get("prefill_hol") == v["virtual"].get("prefill_hol") == 3
                           for v in minnows), minnows  # fmt: skip


def test_vllm_fidelity_ladder(vllm_profile: Path, tmp_path: Path) -> None:
    table = _fidelity(tmp_path, "vllm", VLLM_FLAGS, "fidelity_ladder", vllm_profile)
    note(
        "vllm fidelity_ladder against the shipped one-boot profile",
        f"{table['within']} of {table['figures']}; shipped profile: 17 of 24",
    )
    assert _arms(table) == {
        "groups.streams.count=1", "groups.streams.count=2", "groups.streams.count=4"}  # fmt: skip


def test_vllm_fidelity_politeness(vllm_profile: Path, tmp_path: Path) -> None:
    table = _fidelity(tmp_path, "vllm", VLLM_FLAGS, "fidelity_politeness", vllm_profile)
    note(
        "vllm fidelity_politeness against the shipped one-boot profile",
        f"{table['within']} of {table['figures']}; shipped profile: 10 of 14",
    )
    assert _arms(table) == {"max_num_batched_tokens=512", "max_num_batched_tokens=256"}


def test_llamacpp_calibration_and_fidelity(tmp_path: Path) -> None:
    # Probes up to 4096 tokens: the 8k probes were 3 of this calibration's 4.5 minutes on a
    # loaded 2-core box (an 8127-token prefill 56 s on each boot, a decode at 8063 of context
    # 52 s), and what is asserted here is the facts and the fidelity table's honesty, not
    # how far the fit reaches.
    profile = _calibrate(tmp_path, "llama.cpp", (), "--max-prompt", "4096")
    fitted = load_profile_file(profile)
    assert fitted.facts["max_num_seqs"] == 4  # loadgen's -np default
    assert "block_size" not in fitted.facts  # llama.cpp pages no blocks
    assert fitted.sources["server_counters"].startswith("none")  # no TTFT histogram
    _fidelity(tmp_path, "llama.cpp", (), "fidelity_whale", profile)
