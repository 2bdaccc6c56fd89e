"""The wall clock's client over several replicas: one OpenAIClient per replica behind a
Router (client/routing.py), in the run's parent process or in each worker process. Apart from
the policy so that reading the options (the policy's names) loads no HTTP client."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import cast

from loadgen.client.openai import OpenAIClient
from loadgen.client.routing import Router
from loadgen.records import StreamRecord
from loadgen.request import StreamRequest


class RoutedClient:
    """The wall clock's streams over several replicas' clients: each request to the replica
    the router picks, client i being replica i, so named here that each record it makes names
    that replica. Metadata (models, tokenize) goes to the first replica, which every replica
    is taken to mirror (same model, same tokenizer)."""

    def __init__(self, clients: Sequence[OpenAIClient], router: Router) -> None:
        for i, client in enumerate(clients):
            client.replica = i
        self.clients, self.router = clients, router

    @property
    def run_start_ns(self) -> int:
        """The run clock's zero every replica's client stamps against."""
        return self.clients[0].run_start_ns

    @run_start_ns.setter
    def run_start_ns(self, ns: int) -> None:
        # A Ray actor is handed its run start per run, in its own host's clock.
        for client in self.clients:
            client.run_start_ns = ns

    async def stream(self, req: StreamRequest) -> StreamRecord:
        replica = self.router.pick(req)
        try:
            return await self.clients[replica].stream(req)
        finally:
            self.router.done(replica)

    def live_counts(self) -> tuple[int, int]:
        counts = [c.live_counts() for c in self.clients]
        return sum(a for a, _ in counts), sum(s for _, s in counts)

    def take_cancelled(self) -> list[StreamRecord]:
        return [rec for c in self.clients for rec in c.take_cancelled()]

    async def warm(self, n: int) -> None:
        """Opens connections ahead on every replica: as many as could go to any one of them.
        A replica that refuses is left to its streams (each an error record naming why); only
        when none answers is the run's target gone."""
        got = await asyncio.gather(*(c.warm(n) for c in self.clients), return_exceptions=True)
        if all(isinstance(g, BaseException) for g in got):
            raise cast(BaseException, got[0])
