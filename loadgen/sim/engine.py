"""A simulated vLLM v1 engine: continuous batching, chunked prefill, a paged KV pool with prefix
caching and preemption, speculative decoding, on virtual time.

The scheduler follows vLLM v1's `Scheduler.schedule()` (vllm/v1/core/sched/scheduler.py):
- There is no prefill or decode phase. Each request has `num_computed` tokens and wants to
  catch up with len(prompt + output) + pending draft tokens; one token budget
  (`max_num_batched_tokens`) is spent per step.
- RUNNING requests are walked first, in the order they were admitted: each gets
  min(what it still needs, budget) tokens, so a decode takes 1 + k (its drafts count against the
  budget) and an ongoing chunked prefill takes whatever is left, up to all of it. The walk stops
  when the budget is 0. A whale admitted first therefore takes every token of every step until
  its prefill ends; a minnow admitted before it keeps decoding one token per step, each step
  lasting as long as the whale's chunk (the seed's ~1 tok/s rationed decode).
- When a running request cannot get the KV blocks for its tokens, the LAST running request
  (the most recently admitted) is preempted, repeatedly, possibly the request itself
  (`self.running.pop()` under the FCFS policy). Preemption is recompute: blocks freed,
  num_computed = 0, back to the head of WAITING.
- WAITING requests are considered only if nothing was preempted in this step, strictly FCFS:
  while budget > 0 and len(running) < max_num_seqs, the head gets its longest prefix-cache hit
  and a chunk of min(num_tokens - cached, budget); if its blocks cannot be allocated the walk
  stops (no skipping ahead). A resumed request's num_tokens includes its generated tokens, so it
  recomputes prompt + output as prefill; the step that completes it samples the NEXT token, so
  nothing already sent is sent again.
- `long_prefill_token_threshold` (vLLM's knob, 0 = off) caps any one request's chunk.

What follows from these rules, and is not a special case: with the budget at 512 instead of
2048 a whale first in the queue still takes the whole budget of every step, so minnows queued
behind it wait for its entire prefill at ANY budget (also what real vLLM on CPU shows, see
../shared/real-servers.md). A smaller budget helps minnows that reached the queue before the
whale (their decode steps get shorter) and, with long_prefill_token_threshold, queued ones. The
seed's politeness rows (1024/512: minnows live in ~5 s) fit minnows ahead of the whale: its TTFT
grew by about their prefill time (62.6 -> 69.6 -> 72.2 s).

Also as vLLM v1: a request's first token comes from the step that completes its prefill;
drafts are proposed for every request that was fully computed by a step, so the next step
verifies k drafts; acceptance is per position (draft i accepted with probability a if all
before it were) and all emitted tokens of a step form ONE output; rejected drafts roll
num_computed back; counters count tokens the way vLLM's do (prefix-cache queries += num_tokens
at admission, hits += cached tokens; prompt tokens once per request at its first token).
With a drafter (num_speculative_tokens > 0) the last prefix-cache hit block is dropped, as vLLM
does for EAGLE: the seed's "reuse is (blocks - 1) x B".

Not modelled: EOS (every request runs to max_tokens, finish_reason "length"; `ignore_eos` and
`min_tokens` are accepted and trivially honoured), priorities, async scheduling, max_model_len.
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections import deque
from dataclasses import dataclass

from loadgen.sim.kvcache import KVCacheManager, block_hashes
from loadgen.sim.profiles import TINY, StepProfile
from loadgen.sim.requests import LiveRequest, RequestTruth, SimRequest, TokenOutput, seed_of
from loadgen.sim.tokenizer import SimTokenizer

__all__ = [
    "AdmissionRejected",
    "Engine",
    "EngineConfig",
    "RequestTruth",
    "SimRequest",
    "Step",
    "TokenOutput",
]


class AdmissionRejected(Exception):
    """The waiting queue is full (max_waiting)."""


@dataclass(frozen=True, slots=True)
class EngineConfig:
    max_num_seqs: int = 4
    max_num_batched_tokens: int = 2048
    block_size: int = 16
    num_gpu_blocks: int = 8192
    enable_prefix_caching: bool = True
    num_speculative_tokens: int = 0
    acceptance_rate: float = 0.7
    profile: StepProfile = TINY
    seed: int = 0
    cache_dead: bool = False
    # Step time grows by this fraction per hour of engine time (seed 004's long-session drift).
    drift_per_hour: float = 0.0
    # Admission rejection once this many requests wait.
    max_waiting: int | None = None
    # vLLM's per-request chunk cap (0 = off).
    long_prefill_token_threshold: int = 0
    # Engine seconds between a request's arrival and the scheduler seeing it: the fixed cost of
    # every request (API server, tokenizer, IPC), the TTFT floor a fast GPU's prefill hides in.
    request_overhead_s: float = 0.0
    # Probability that a request admitted with a prefix-cache hit answers other tokens than
    # the same prompt cold would (a cache that restores wrong state).
    warm_mismatch: float = 0.0

    def __post_init__(self) -> None:
        for name in ("max_num_seqs", "max_num_batched_tokens", "block_size", "num_gpu_blocks"):
            if getattr(self, name) < 1:
                raise ValueError(f"EngineConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.num_speculative_tokens < 0 or self.long_prefill_token_threshold < 0:
            raise ValueError("num_speculative_tokens and long_prefill_token_threshold must be >= 0")
        if not 0.0 <= self.acceptance_rate <= 1.0:
            raise ValueError(f"acceptance_rate must be in [0, 1], got {self.acceptance_rate}")
        if self.request_overhead_s < 0 or not 0.0 <= self.warm_mismatch <= 1.0:
            raise ValueError("request_overhead_s must be >= 0 and warm_mismatch in [0, 1]")
        if self.max_waiting is not None and self.max_waiting < 0:
            raise ValueError(f"max_waiting must be >= 0 or None, got {self.max_waiting}")


@dataclass(frozen=True, slots=True)
class Step:
    index: int
    start_s: float
    duration_s: float
    num_prefill_tokens: int
    num_decode_tokens: int
    num_scheduled_tokens: int
    outputs: tuple[TokenOutput, ...]


class Engine:
    """The scheduler, the KV pool and the counters; `step()` runs one iteration on virtual time."""

    def __init__(self, cfg: EngineConfig) -> None:
        self.config = cfg
        self.now_s = 0.0
        self.tokenizer = SimTokenizer()
        self.kv = KVCacheManager(
            cfg.num_gpu_blocks,
            cfg.block_size,
            enable_caching=cfg.enable_prefix_caching,
            cache_dead=cfg.cache_dead,
            drop_last_hit_block=cfg.num_speculative_tokens > 0,
        )
        self._pending: list[tuple[float, int, LiveRequest]] = []
        self._arrivals = itertools.count()
        self._waiting: deque[LiveRequest] = deque()
        self._running: list[LiveRequest] = []
        self._live: dict[str, LiveRequest] = {}
        self._truth: dict[str, RequestTruth] = {}
        self._step_index = 0
        self._mismatch_rng = random.Random(cfg.seed)
        self.num_preemptions_total = 0
        self.prompt_tokens_total = 0
        self.generation_tokens_total = 0
        self.prefix_cache_queries_total = 0
        self.prefix_cache_hits_total = 0
        self.spec_decode_num_drafts_total = 0
        self.spec_decode_num_draft_tokens_total = 0
        self.spec_decode_num_accepted_tokens_total = 0
        self.iteration_tokens: list[int] = []  # scheduled tokens of every step
        # What vLLM v1's vllm:iteration_tokens_total observes: only steps that emit a token
        # (a chunk of a prefill still under way emits none), each the tokens it emitted plus
        # the whole prompt of every request whose first token it emitted.
        self.emitting_step_tokens: list[int] = []
        self.ttft_samples: list[float] = []  # engine seconds, one per request's first token

    @property
    def num_requests_running(self) -> int:
        return len(self._running)

    @property
    def num_requests_waiting(self) -> int:
        return len(self._waiting)

    @property
    def kv_cache_usage_perc(self) -> float:
        return self.kv.usage

    def add_request(self, req: SimRequest) -> None:
        cfg = self.config
        ids = req.prompt_token_ids
        if req.request_id in self._truth:
            raise ValueError(f"request id {req.request_id!r} was already used")
        if not ids:
            raise ValueError("the prompt must have at least one token")
        if req.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {req.max_tokens}")
        if min(ids) < 0 or max(ids) >= self.tokenizer.vocab_size:
            raise ValueError(f"prompt token ids must be in 0..{self.tokenizer.vocab_size - 1}")
        pool = cfg.num_gpu_blocks * cfg.block_size
        if len(ids) + req.max_tokens > pool:
            raise ValueError(
                f"prompt ({len(ids)}) + max_tokens ({req.max_tokens}) can never fit the KV pool "
                f"of {pool} tokens"
            )
        if cfg.max_waiting is not None and self._num_queued() >= cfg.max_waiting:
            raise AdmissionRejected(f"{self._num_queued()} requests already waiting")
        live = LiveRequest(req, cfg.seed, self.tokenizer)
        self._live[live.id] = live
        self._truth[live.id] = live.truth
        ready_s = req.arrival_s + cfg.request_overhead_s
        heapq.heappush(self._pending, (ready_s, next(self._arrivals), live))

    def abort_request(self, request_id: str) -> None:
        r = self._live.pop(request_id, None)
        if r is None:
            return
        if r.state == "running":
            self._running.remove(r)
        elif r.state == "waiting":
            self._waiting.remove(r)
        self.kv.free(r.id)
        r.state = "aborted"  # a pending entry is dropped when it comes due
        self._finish(r, self.now_s, "abort")

    def has_unfinished(self) -> bool:
        return bool(self._live)

    def next_step_start_s(self) -> float | None:
        """When step() would start its next step: now when requests wait or run, else the
        next arrival (None: nothing left). A discrete-event driver advances to this instant."""
        if self._running or self._waiting:
            return self.now_s
        pending = self._live_pending()
        return max(self.now_s, pending[0][0]) if pending else None

    def ground_truth(self) -> list[dict]:
        return [t.to_dict() for t in self._truth.values()]

    def step(self) -> Step | None:
        self._release_arrivals()
        if not self._running and not self._waiting:
            return None
        start, index = self.now_s, self._step_index
        plan = self._schedule(start)
        duration = self._duration(plan, start)
        end = self.now_s = start + duration
        self._step_index += 1
        counted = self.prompt_tokens_total + self.generation_tokens_total
        outputs = self._execute(plan, index, start, end)
        prefill = sum(p[1] for p in plan if not p[3])
        scheduled = sum(p[1] for p in plan)
        self.iteration_tokens.append(scheduled)
        if outputs:
            emitted = self.prompt_tokens_total + self.generation_tokens_total - counted
            self.emitting_step_tokens.append(emitted)
        return Step(index, start, duration, prefill, scheduled - prefill, scheduled, outputs)

    def run_until_idle(self) -> list[Step]:
        """Every step until nothing is left to do, on virtual time (no sleeping)."""
        steps = []
        while (step := self.step()) is not None:
            steps.append(step)
        return steps

    # -- scheduling -------------------------------------------------------------------------

    def _num_queued(self) -> int:
        return len(self._waiting) + sum(1 for *_, r in self._pending if r.state == "pending")

    def _live_pending(self) -> list[tuple[float, int, LiveRequest]]:
        """The arrival heap, its head no longer a request aborted before it arrived."""
        pending = self._pending
        while pending and pending[0][2].state != "pending":
            heapq.heappop(pending)
        return pending

    def _release_arrivals(self) -> None:
        pending = self._live_pending()
        if not self._running and not self._waiting and pending:
            # Idle: jump to the next arrival.
            self.now_s = max(self.now_s, pending[0][0])
        while pending and pending[0][0] <= self.now_s:
            r = heapq.heappop(pending)[2]
            if r.state == "pending":
                r.state = "waiting"
                self._waiting.append(r)

    def _schedule(self, now: float) -> list[tuple[LiveRequest, int, int, bool, int]]:
        """(request, tokens scheduled, num_computed before, is_decode, cached tokens restored)."""
        cfg = self.config
        budget = cfg.max_num_batched_tokens
        plan: list[tuple[LiveRequest, int, int, bool, int]] = []
        running = self._running
        preemptions_before = self.num_preemptions_total
        i = 0
        while i < len(running) and budget > 0:
            r = running[i]
            n = self._chunk(len(r.tokens) + r.num_spec - r.num_computed, budget)
            if not self._allocate_preempting(r, r.num_computed + n, now):
                break
            plan.append((r, n, r.num_computed, r.num_computed == len(r.tokens) - 1, 0))
            budget -= n
            i += 1
        if self.num_preemptions_total > preemptions_before:
            return plan
        waiting = self._waiting
        while waiting and budget > 0 and len(running) < cfg.max_num_seqs:
            r = waiting[0]
            hits = self.kv.computed_blocks(self._hashes(r), len(r.tokens))
            cached = len(hits) * cfg.block_size
            n = self._chunk(len(r.tokens) - cached, budget)
            if not self.kv.allocate(r.id, cached + n, hits):
                break
            waiting.popleft()
            running.append(r)
            r.state = "running"
            r.num_computed = cached
            self._record_admission(r, now, cached)
            plan.append((r, n, cached, False, cached))
            budget -= n
        return plan

    def _chunk(self, wanted: int, budget: int) -> int:
        threshold = self.config.long_prefill_token_threshold
        if 0 < threshold < wanted:
            wanted = threshold
        return min(wanted, budget)

    def _allocate_preempting(self, r: LiveRequest, num_tokens: int, now: float) -> bool:
        """Blocks for r's tokens, preempting the newest running requests until they fit; False
        when r itself had to go."""
        while not self.kv.allocate(r.id, num_tokens):
            victim = self._running.pop()
            self._preempt(victim, now)
            if victim is r:
                return False
        return True

    def _preempt(self, r: LiveRequest, now: float) -> None:
        self.kv.free(r.id)
        r.num_computed = 0
        r.num_spec = 0
        r.state = "waiting"
        self._waiting.appendleft(r)
        self.num_preemptions_total += 1
        r.truth.preemptions.append(now)

    def _hashes(self, r: LiveRequest) -> list[bytes]:
        if not self.config.enable_prefix_caching:
            return r.hashes
        return block_hashes(r.tokens, self.config.block_size, r.hashes, r.req.cache_salt)

    def _record_admission(self, r: LiveRequest, now: float, cached: int) -> None:
        truth = r.truth
        if not truth.admitted_s:
            truth.num_cached_tokens = cached
            if cached and self._mismatch_rng.random() < self.config.warm_mismatch:
                # Another stream of text than the prompt's own: what a cold send never answers.
                r.gen = self.tokenizer.generator(seed_of(self.config.seed + 1, r.id.encode()))
        truth.admitted_s.append(now)
        if self.config.enable_prefix_caching:
            self.prefix_cache_queries_total += len(r.tokens)
            self.prefix_cache_hits_total += cached

    # -- execution --------------------------------------------------------------------------

    def _duration(self, plan: list[tuple[LiveRequest, int, int, bool, int]], start: float) -> float:
        decode_context = decode_tokens = 0
        prefill_work = 0.0
        for _, n, before, is_decode, _ in plan:
            if is_decode:
                decode_context += before + n
                decode_tokens += n
            else:
                prefill_work += n * (before + n / 2)
        t = self.config.profile.step_s(
            scheduled_tokens=sum(p[1] for p in plan),
            decode_context_tokens=decode_context,
            prefill_attention_work=prefill_work,
            restored_tokens=sum(p[4] for p in plan),
            decode_tokens=decode_tokens,
        )
        return t * (1.0 + self.config.drift_per_hour * start / 3600.0)

    def _execute(
        self,
        plan: list[tuple[LiveRequest, int, int, bool, int]],
        index: int,
        start: float,
        end: float,
    ) -> tuple[TokenOutput, ...]:
        outputs = []
        finished = False
        caching, block = self.config.enable_prefix_caching, self.config.block_size
        for r, n, before, is_decode, _ in plan:
            r.num_computed = before + n
            if not is_decode:
                r.truth.prefill_chunks.append((index, start, end, n))
            out = self._sample(r, index, end) if r.num_computed >= len(r.tokens) else None
            full = min(r.num_computed, len(r.tokens)) // block
            if caching and full > before // block:
                self.kv.cache_full_blocks(r.id, self._hashes(r), full)
            if out is not None:
                outputs.append(out)
                if out.finished:
                    self.kv.free(r.id)
                    del self._live[r.id]
                    r.state = "finished"
                    self._finish(r, end, "length")
                    finished = True
        if finished:
            self._running = [r for r in self._running if r.state == "running"]
        return tuple(outputs)

    def _sample(self, r: LiveRequest, index: int, end: float) -> TokenOutput:
        """The tokens one step emits for r: 1 + accepted drafts, capped at max_tokens."""
        tokens = r.tokens
        drafts = r.num_computed - len(tokens)
        accepted = 0
        if drafts:
            a, rng = self.config.acceptance_rate, r.spec_rng
            while accepted < drafts and rng.random() < a:
                accepted += 1
            r.num_computed -= drafts - accepted
            self.spec_decode_num_drafts_total += 1
            self.spec_decode_num_draft_tokens_total += drafts
            self.spec_decode_num_accepted_tokens_total += accepted
        emit = min(accepted + 1, r.max_tokens + r.prompt_len - len(tokens))
        forced, sent = r.req.answer_prefix, len(tokens) - r.prompt_len
        if sent < len(forced):
            new = list(forced[sent : sent + emit])
            new += r.gen.take(emit - len(new))
        else:
            new = r.gen.take(emit)
        tokens.extend(new)
        self.generation_tokens_total += emit
        truth = r.truth
        if truth.first_token_s is None:
            truth.first_token_s = end
            self.ttft_samples.append(end - truth.arrival_s)
            self.prompt_tokens_total += r.prompt_len
        truth.step_index.append(index)
        truth.step_end_s.append(end)
        truth.step_tokens.append(emit)
        completion = truth.completion_tokens = len(tokens) - r.prompt_len
        done = completion >= r.max_tokens
        r.num_spec = 0 if done else self.config.num_speculative_tokens
        return TokenOutput(
            r.id,
            tuple(new),
            done,
            "length" if done else None,
            r.prompt_len,
            truth.num_cached_tokens,
            completion,
        )

    @staticmethod
    def _finish(r: LiveRequest, when: float, reason: str) -> None:
        r.truth.finished_s = when
        r.truth.finish_reason = reason
        r.num_spec = 0
