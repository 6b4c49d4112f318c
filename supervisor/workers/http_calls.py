"""A worker's brokered HTTP calls: checked, performed on the broker's threads, answered.

Brokered HTTP has threads of its own, so slow servers cannot starve the store's writes; each
worker has its share of them (``WorkerHandle.http_slots``) and at most
:data:`MAX_HTTP_IN_FLIGHT` calls in flight: more is a flood, and kills it.

The broker is imported at the first call, not with the supervisor: it loads ``http.client``,
``ssl`` and ``email`` (~8 ms of every start, for apps that may never make a request).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from concurrent.futures import ThreadPoolExecutor

import zmq

from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.protocol.messages import HttpCall, HttpResult
from aotui.supervisor.desktop.app_record import AppRecord
from aotui.supervisor.desktop.controls import net_narrowing
from aotui.supervisor.instrument import Instrument
from aotui.supervisor.workers.exits import ExitReason
from aotui.supervisor.workers.handle import WorkerHandle
from aotui.supervisor.workers.host import RunnerHost
from aotui.supervisor.workers.kill import kill_worker

__all__ = ["MAX_HTTP_IN_FLIGHT", "HttpCalls"]

#: Brokered HTTP requests one worker may have in flight; more is a flood.
MAX_HTTP_IN_FLIGHT = 8


class HttpCalls:
    """The desktop's brokered HTTP: its thread pool and the calls in flight on it."""

    def __init__(self, host: RunnerHost) -> None:
        self.host = host
        self._pool: ThreadPoolExecutor | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        #: Sees (and may bend) each brokered fetch (a chaos run's http_fault).
        self.instrument = Instrument()

    @property
    def pool(self) -> ThreadPoolExecutor:
        """The broker's thread pool, made at the first call (its threads start as calls come)."""
        if self._pool is None:
            from aotui.supervisor.broker.http import broker_pool

            self._pool = broker_pool()
        return self._pool

    def submit(self, app: AppRecord, worker: WorkerHandle, call: HttpCall) -> None:
        """Start performing ``call`` for ``worker``; a worker over its in-flight cap is killed."""
        if worker.http_in_flight >= MAX_HTTP_IN_FLIGHT:
            self.host.log(f"{app.name} flooded the HTTP broker; killing it.")
            kill_worker(app, ExitReason.PROTOCOL_VIOLATION)
            return
        worker.http_in_flight += 1
        task = asyncio.get_running_loop().create_task(self._perform(app, worker, call))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _perform(self, app: AppRecord, worker: WorkerHandle, call: HttpCall) -> None:
        """Perform one brokered HTTP request off the loop and answer the worker."""
        from aotui.supervisor.broker.http import fetch, policy_from_permissions

        policy = policy_from_permissions(
            app.manifest.permissions, self.host.config.allow_private_http
        )
        narrowing = net_narrowing(self.host.config.policy, app)
        if narrowing is not None:
            policy = dataclasses.replace(
                policy, narrowed_to=narrowing.net, narrowed_by=narrowing.rule("net")
            )
        try:
            request = call.request  # its fields' types checked by the codec on receipt
            async with worker.http_slots:  # one app never holds the whole pool
                if app.worker is not worker or app.kill_reason:
                    # Its worker is gone or being killed (a flood, a violation): a request it
                    # queued is neither performed nor reported; nobody could read the answer.
                    return
                loop = asyncio.get_running_loop()
                fetcher = self.instrument.fetch(app, fetch)
                response = await loop.run_in_executor(self.pool, fetcher, request, policy)
            result = HttpResult(call.call_id, response=response)
        except AotuiError as exc:
            if exc.code is ErrorCode.E_PERMISSION:
                # The app's line, not the desktop's: an app whose requests are refused as fast as
                # it makes them evicts only its own lines from System Logs (its share).
                self.host.log(f"{app.name}: HTTP request refused: {exc.message}", app.app_id)
            result = HttpResult(call.call_id, error=exc.to_dict())
        finally:
            worker.http_in_flight -= 1
        if app.worker is worker:
            with contextlib.suppress(zmq.ZMQError, AotuiError):
                await worker.send(result)

    def shutdown(self) -> None:
        """Stop the pool; calls still running are abandoned (their workers are gone)."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
