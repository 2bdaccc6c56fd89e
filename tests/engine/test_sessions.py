"""Multi-turn sessions against the sim: each turn's prompt is the previous turn's prompt, the
answer exactly as generated, then the new message (checked on the token ids the sim received
and generated); the prefix cache carries the session; TTFT follows the new tokens."""

import itertools
from pathlib import Path

import pytest

from loadgen.engine.run import RunOptions, run_plan
from loadgen.engine.sessions import conversation
from loadgen.records import read_streams
from loadgen.scenario.load import ScenarioError, load_scenario
from loadgen.scenario.plan import plan
from loadgen.scenario.prompts import PromptBuilder
from loadgen.sim.engine import EngineConfig
from loadgen.sim.profiles import sim_profile
from loadgen.sim.server import SimServerConfig, ground_truth_rows, start_sim_server
from loadgen.sim.tokenizer import SimTokenizer

TOK = SimTokenizer()
SESSIONS = """
name: sess
api: {api}
seed: 5
groups:
  - name: agents
    count: 2
    prompt: {{shape: prose}}
    max_tokens: 40
    session: {{turns: 4, system_tokens: 800, user_tokens: 300, think_s: 0.01{extra}}}
"""


class SimCounter:
    method = "local"

    async def count(self, text: str) -> int:
        return TOK.count(text)


def write(folder: Path, api: str = "chat", extra: str = "") -> Path:
    path = folder / "sess.yaml"
    path.write_text(SESSIONS.format(api=api, extra=extra))
    return path


def test_plan_sizes_turns_and_caps_the_context(tmp_path: Path) -> None:
    s = load_scenario(write(tmp_path, extra=", max_context_tokens: 1900"))
    rep = plan(s).arms[0].reps[0]
    assert rep.requests == () and len(rep.sessions) == 2
    # Contexts: 1100, 1440, 1780; turn 3 would need 2120 > 1900, so the session ends.
    assert [t.turn for t in rep.sessions[0].turns] == [0, 1, 2]
    assert [t.think_ns for t in rep.sessions[0].turns] == [0, 10_000_000, 10_000_000]
    assert rep.sessions[0].system.salt != rep.sessions[1].system.salt


def test_session_errors_name_file_line_and_field(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(SESSIONS.format(api="chat", extra=", think: gaussian, max_context_tokens: 50")
                    + "arrival: {poisson: {rate_per_s: 1}}\n")  # fmt: skip
    with pytest.raises(ScenarioError) as err:
        load_scenario(path)
    text = str(err.value)
    assert "bad.yaml:10: groups.agents.session.think: got 'gaussian'" in text
    assert "groups.agents.session.max_context_tokens: got 50 (expected >= the first turn" in text
    assert "under a poisson arrival (expected arrival together or staggered)" in text


def test_conversation_resends_history_in_order() -> None:
    messages, _prompt = conversation("chat", "S", ["u0", "u1"], ["a0"])
    assert messages == (
        {"role": "system", "content": "S"}, {"role": "user", "content": "u0"},
        {"role": "assistant", "content": "a0"}, {"role": "user", "content": "u1"},
    )  # fmt: skip
    assert conversation("completions", "S", ["u0", "u1"], ["a0"]) == (None, "Su0a0u1")


def sim_config() -> SimServerConfig:
    engine = EngineConfig(
        max_num_seqs=8, max_num_batched_tokens=512, block_size=16, num_gpu_blocks=4096,
        enable_prefix_caching=True, profile=sim_profile("default"),
    )  # fmt: skip
    return SimServerConfig(engine=engine, max_model_len=16384)


async def run_sessions_on_sim(tmp_path: Path):
    """Runs the scenario on a sim that records the ids it received and generated."""
    s = load_scenario(write(tmp_path))
    prompts: dict[str, list[int]] = {}
    generated: dict[str, list[int]] = {}
    async with start_sim_server(sim_config()) as sim:
        runner = sim.runner
        submit = runner.submit

        def recording_submit(req, arrival_s=None):
            prompts[req.request_id] = list(req.prompt_token_ids)
            queue = submit(req, arrival_s)
            out = generated.setdefault(req.request_id, [])
            put = queue.put_nowait

            def put_recorded(item):
                out.extend(item.token_ids)
                put(item)

            queue.put_nowait = put_recorded
            return queue

        runner.submit = recording_submit
        opts = RunOptions(base_url=sim.url, out_root=tmp_path / "runs", progress=False)
        run_dir = await run_plan(plan(s), opts, warn=lambda m: None)
        truth = {r["client_request_id"]: r for r in ground_truth_rows(sim.state)}
        ids = {cid: rid for rid, cid in sim.state.client_ids.items()}
    return s, run_dir, truth, prompts, generated, ids


async def test_turns_resend_the_answers_token_exact_and_hit_the_cache(tmp_path: Path) -> None:
    s, run_dir, truth, prompts, generated, ids = await run_sessions_on_sim(tmp_path)
    recs = [r for r in read_streams(run_dir) if r.phase == "measure"]
    assert len(recs) == 8 and all(r.status == "ok" for r in recs)
    users = {}
    builder = PromptBuilder(SimCounter())
    for sess in plan(s).arms[0].reps[0].sessions:
        users[sess.id] = [(await builder.build(t.user)).text for t in sess.turns]
    for r in recs:
        assert r.session is not None and r.id == f"{r.session}/t{r.turn}"
    for sid in users:
        turns = sorted((r for r in recs if r.session == sid), key=lambda r: r.turn)
        assert [r.turn for r in turns] == [0, 1, 2, 3]
        for prev, cur in itertools.pairwise(turns):
            p_prev, p_cur = prompts[ids[prev.id]], prompts[ids[cur.id]]
            answer = generated[ids[prev.id]]
            assert len(answer) == prev.completion_tokens == 40
            n = len(p_prev)
            assert p_cur[:n] == p_prev
            assert p_cur[n : n + 40] == answer
            tail = "<|im_end|>\n<|im_start|>user\n" + users[sid][cur.turn]
            tail += "<|im_end|>\n<|im_start|>assistant\n"
            assert p_cur[n + 40 :] == TOK.encode(tail)
            assert TOK.count(users[sid][cur.turn]) == 300
            # The cache holds every full block of the previous prompt and its answer.
            assert cur.cached_tokens == truth[cur.id]["num_cached_tokens"]
            assert cur.cached_tokens == (n + 40 - 1) // 16 * 16
        assert turns[0].cached_tokens == 0


async def test_ttft_follows_new_tokens_and_the_report_shows_turns(tmp_path: Path) -> None:
    from loadgen.report.cmd import write_report

    _, run_dir, truth, _, _, _ = await run_sessions_on_sim(tmp_path)
    recs = [r for r in read_streams(run_dir) if r.phase == "measure"]
    for sid in {r.session for r in recs}:
        turns = sorted((r for r in recs if r.session == sid), key=lambda r: r.turn)
        # Engine-side TTFT on the sim's clock: each later turn prefills ~316 new tokens of a
        # larger context, and is faster than turn 0's cold 1,116.
        ttft = [truth[r.id]["first_token_s"] - truth[r.id]["arrival_s"] for r in turns]
        assert all(t < 0.6 * ttft[0] for t in ttft[1:]), ttft
        assert turns[-1].prompt_tokens > 1.9 * turns[0].prompt_tokens
    write_report(run_dir)
    report = (run_dir / "report.txt").read_text()
    assert "Sessions per turn" in report
    assert (run_dir / "sessions.png").stat().st_size > 0
    assert "<h2>Sessions</h2>" in (run_dir / "report.html").read_text()


def test_agent_sessions_grows_from_10k_to_45k() -> None:
    s = load_scenario("agent_sessions")
    (g,) = s.groups
    sessions = plan(s).arms[0].reps[0].sessions
    assert len(sessions) == 4 and all(len(x.turns) == 8 for x in sessions)
    cfg = g.session
    contexts = [cfg.system_tokens + cfg.user_tokens + k * (cfg.user_tokens + g.max_tokens)
                for k in range(8)]  # fmt: skip
    assert (contexts[0], contexts[-1]) == (10_000, 45_000)


async def test_agent_sessions_on_the_virtual_clock(tmp_path: Path) -> None:
    """Exact on the virtual clock: the engine prefills only each turn's new tokens, the cache
    holds every earlier turn, and TTFT follows the new tokens, not the context."""
    from support.virtual import run_virtual

    run = await run_virtual("agent_sessions", [], tmp_path / "four")
    recs = [r for r in run.records.values() if r.phase == "measure"]
    assert len(recs) == 32 and all(r.status == "ok" for r in recs)
    for sid in {r.session for r in recs}:
        turns = sorted((r for r in recs if r.session == sid), key=lambda r: r.turn)
        assert [r.turn for r in turns] == list(range(8))
        assert turns[0].cached_tokens == 0
        growth = set()
        for prev, cur in itertools.pairwise(turns):
            # Every full block of the previous prompt and its answer is a hit.
            assert cur.cached_tokens == (prev.prompt_tokens + 500 - 1) // 16 * 16
            growth.add(cur.prompt_tokens - prev.prompt_tokens - prev.completion_tokens)
        assert len(growth) == 1 and 4500 <= growth.pop() < 4520  # the message + its template
        for r in turns:
            prefilled = sum(c[3] for c in run.truth[r.id]["prefill_chunks"])
            assert prefilled == r.prompt_tokens - r.cached_tokens
    # One session alone: no neighbour's prefill in the way, so TTFT is the turn's own work.
    solo = await run_virtual("agent_sessions", ["groups.agents.count=1"], tmp_path / "one")
    turns = sorted(solo.records.values(), key=lambda r: r.turn)
    ttft = [(r.t_first_ns - r.t_sent_ns) / 1e9 for r in turns]
    # A cold prefill grows at least linearly with its tokens; every later turn stays under
    # half of that bound for its whole context (it grows only by attention over the cache).
    cold_rate = ttft[0] / turns[0].prompt_tokens
    for r, t in zip(turns[1:], ttft[1:], strict=True):
        assert t < 0.5 * cold_rate * r.prompt_tokens, (r.turn, t)


MIXED = """
name: mixed
api: chat
seed: 5
arrival: {staggered: {interval_s: 0.5}}
groups:
  - name: plain
    count: 3
    prompt: {tokens: 200, shape: prose}
    max_tokens: 20
  - name: talk
    count: 3
    prompt: {shape: prose}
    max_tokens: 20
    session: {turns: 2, system_tokens: 300, user_tokens: 100, think_s: 0.01}
"""


async def test_a_plain_stream_and_a_session_due_at_one_instant_go_in_plan_order(
    tmp_path: Path,
) -> None:
    """Sessions start from the open loop's schedule: at each staggered instant the plain
    group's request reaches the server before the session's first turn, on the virtual clock
    as when each clock had a loop of its own."""
    from support.virtual import run_virtual

    path = tmp_path / "mixed.yaml"
    path.write_text(MIXED)
    run = await run_virtual(path, [], tmp_path / "out")
    (sim,) = run.sims
    measured = [rid for rid in sim.prompts if run.records[rid].phase == "measure"]
    firsts = [rid for rid in measured if "/t1" not in rid]
    assert [run.records[rid].group for rid in firsts] == ["plain", "talk"] * 3
    assert len({run.records[rid].t_sent_ns for rid in firsts[:2]}) == 1  # one instant
