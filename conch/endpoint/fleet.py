"""The TargetModels behind one local MME and what the SageMaker platform does with them: download on first
use, load once however many callers ask at the same time, unload the least recently used ones when a load
would pass ``max_loaded`` or the memory budget (and on a 507), and delete unpacked files of unloaded models
past the disk budget. With ``StepNames.SHARED`` (the default, as SageMaker's image) names stay as uploaded and
a TargetModel sharing step names with another is a collision (one warning, ``StepNameCollisions``); with
``StepNames.ISOLATE`` each archive's step models are renamed on unpacking when another TargetModel already
uses their names (``stage.py``). When tritonserver exits, every model counts as
unloaded (``server_lost``) and loads wait until the restarted server is back (``server_back``).

All state lives on the front's event loop; network and disk work happens outside the lock, so a slow load
of one TargetModel never holds up invocations of loaded ones.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from conch.builder.stamping import step_models
from conch.endpoint.disk import Configs, DiskCache
from conch.endpoint.hop import HopError, HopTimeout, TritonHop
from conch.endpoint.metrics import Metrics
from conch.endpoint.protocol import EndpointError, ModelError
from conch.endpoint.sources import ModelSource
from conch.endpoint.stage import StepClaims, rename_steps
from conch.endpoint.step_names import StepNames
from conch.errors import ConchError

log = logging.getLogger("conch.endpoint")

LOAD_RETRIES_ON_507 = 3
WAIT_FOR_SLOT_S = 1.0  # re-check capacity at least this often while every loaded model is busy
WAIT_FOR_SERVER_S = 180.0  # a load waits this long for a restarting tritonserver
DYING_S = 1.0  # a connection dropped by a server that is not yet seen exited: how long it may take to be seen so
DYING_POLL_S = 0.02


class State(enum.Enum):
    REMOTE = "remote"  # only in the source
    FETCHING = "fetching"  # being downloaded and unpacked
    ON_DISK = "on_disk"  # unpacked, not loaded
    LOADING = "loading"
    LOADED = "loaded"
    UNLOADING = "unloading"
    HUNG = "hung"  # its load timed out; Triton may still be loading it


@dataclass
class Model:
    name: str
    state: State = State.REMOTE
    folder: Path | None = None
    disk_bytes: int = 0
    last_used: float = 0.0
    inflight: int = 0
    loads: int = 0
    attempt: int = 0
    failure: EndpointError | None = None
    hung_at: float = 0.0


@dataclass(frozen=True)
class Budgets:
    max_loaded: int | None = None
    memory: int | None = None  # bytes of PSS
    disk: int | None = None  # bytes of unpacked archives
    load_timeout: float = 300.0
    # SageMaker's limits (AWS "Invoke a Multi-Model Endpoint"): an invocation is answered within 60 s, and
    # one whose TargetModel is still loading then gets ModelNotReadyException while the load goes on
    invocation_timeout: float = 60.0
    load_wait: float = 60.0


class Fleet:
    """The table of TargetModels; ``acquire``/``release`` bracket every invocation."""

    def __init__(self, source: ModelSource, disk: DiskCache, hop: TritonHop, metrics: Metrics, budgets: Budgets,
                 memory_probe: Callable[[], int], *, step_names: StepNames = StepNames.SHARED,
                 server_alive: Callable[[], bool] = lambda: True, retry_lookup: bool = False) -> None:
        self.source, self.disk, self.hop, self.metrics, self.budgets = source, disk, hop, metrics, budgets
        self.memory_probe, self.step_names, self.server_alive = memory_probe, step_names, server_alive
        self.retry_lookup = retry_lookup  # ask Triton once more when it answers "unknown model" (not SageMaker's)
        self.models: dict[str, Model] = {}
        self.changed = asyncio.Condition()
        self.loading = 0
        self.baseline_memory = 0
        self.claims = StepClaims()
        self.renamed: set[str] = set()  # TargetModels whose renamed steps were logged
        self.collided: set[str] = set()  # TargetModels counted in StepNameCollisions
        self.server_up = asyncio.Event()
        self.server_up.set()
        self.down: str | None = None  # why tritonserver is not serving ("was killed by SIGSEGV"), until it is back
        self.gone = False  # tritonserver is not restarted again

    # -- invocations -------------------------------------------------------------------------------------
    async def acquire(self, name: str) -> Model:
        """The loaded model, with one more invocation in flight; downloads and loads it first if needed."""
        start = time.monotonic()
        hit = True
        watched: int | None = None  # the load attempt this call waits for (its failure is ours too)
        watching: Model | None = None  # whose attempt: a failed one may have left the table since
        while True:
            async with self.changed:
                if watching is not None and watching.attempt == watched and watching.failure is not None:
                    raise watching.failure
                m = self.models.setdefault(name, Model(name))
                if m.state is State.LOADED:
                    self._take(m, hit)
                    if not hit:
                        self.metrics.time("ModelLoadingWaitTime", time.monotonic() - start)
                    return m
                hit = False
                if m.state is State.HUNG and m.failure is not None and (
                        time.monotonic() < m.hung_at + self.budgets.load_timeout):
                    raise m.failure  # asking Triton again this soon would only evict a healthy model for nothing
                if m.state in (State.FETCHING, State.LOADING, State.UNLOADING):
                    if m.state is not State.UNLOADING:
                        watched, watching = m.attempt, m
                    await self.changed.wait()
                    continue
                m.attempt += 1
                watched, watching = m.attempt, m
                m.failure = None
                m.state = State.FETCHING if m.state is State.REMOTE else State.LOADING
            if await self._bring_up(m):  # loaded, with this invocation already counted in flight
                self.metrics.miss.inc()
                self.metrics.time("ModelLoadingWaitTime", time.monotonic() - start)
                return m

    def take_loaded(self, name: str) -> Model | None:
        """``acquire(name)`` without a task or a wait when the model is loaded (the warm invocation's path): the
        same bookkeeping; None when it is not loaded or the table is locked (then ``acquire``)."""
        m = self.models.get(name)
        if m is None or m.state is not State.LOADED or self.changed.locked():
            return None
        self._take(m, True)
        return m

    def _take(self, m: Model, hit: bool) -> None:
        m.inflight += 1
        m.last_used = time.monotonic()
        (self.metrics.hit if hit else self.metrics.miss).inc()

    async def release(self, m: Model) -> None:
        if m.inflight > 1:  # still busy after this one: nothing waits for that (no lock, no wake-up)
            m.inflight -= 1
            m.last_used = time.monotonic()
            return
        async with self.changed:
            m.inflight -= 1
            m.last_used = time.monotonic()
            if m.inflight == 0:
                self.changed.notify_all()

    async def forget(self, m: Model) -> None:
        """Triton no longer knows a model we thought loaded (404 on invoke): load it again on the next call."""
        async with self.changed:
            if m.state is State.LOADED:
                m.state = State.ON_DISK
                self._count()
                self.changed.notify_all()

    # -- bringing a model up -----------------------------------------------------------------------------
    async def _bring_up(self, m: Model) -> bool:
        """Fetch (if needed) and load ``m``; False when it failed (``m.failure`` says why)."""
        try:
            if m.state is State.FETCHING:
                await self._fetch(m)
            await self._wait_for_server(m)
            await self._reserve_slot(m)
            try:
                await self._load(m)
            finally:
                async with self.changed:
                    self.loading -= 1
        except EndpointError as exc:
            await self._failed(m, exc)
        except ConchError as exc:
            await self._failed(m, EndpointError(f"TargetModel {m.name!r}: {exc}"))
        except HopError as exc:
            await self._failed(m, await self.unreachable(m.name, exc))
        except Exception as exc:  # keep the endpoint serving whatever happened to this one model
            log.exception("bringing up %s failed", m.name)
            await self._failed(m, EndpointError(f"TargetModel {m.name!r}: internal failure: {exc!r}"))
        else:
            await self._trim_disk()
            return m.state is State.LOADED and m.failure is None
        return False

    async def _failed(self, m: Model, exc: EndpointError) -> None:
        log.warning("%s", exc)
        async with self.changed:
            m.failure = exc
            if m.state is not State.HUNG:
                m.state = State.ON_DISK if m.folder is not None else State.REMOTE
            if m.state is State.REMOTE and not m.loads and self.models.get(m.name) is m:
                # nothing of it is held (no files, never loaded): a name callers made up must not stay in the table;
                # the callers of this attempt still get its failure, the next call fetches again (the same error)
                del self.models[m.name]
            self.changed.notify_all()

    async def _fetch(self, m: Model) -> None:
        start = time.monotonic()
        folder, size, configs = await asyncio.to_thread(self.disk.fetch, m.name, self.source)
        try:
            await self._stage(m, folder, configs)
        except BaseException:
            async with self.changed:
                self.claims.release(m.name)
            await asyncio.to_thread(self.disk.remove, folder)
            raise
        self.metrics.time("ModelDownloadingTime", time.monotonic() - start)
        self.metrics.downloads.inc()
        async with self.changed:
            m.folder, m.disk_bytes, m.state = folder, size, State.LOADING
        self._update_disk()

    async def _stage(self, m: Model, folder: Path, configs: Configs) -> None:
        """Give the steps of ``m`` names of their own if another TargetModel uses theirs (isolate mode); in
        shared mode, report a TargetModel whose step names another TargetModel uses (a collision). ``configs``:
        the fetch's, as its check parsed them."""
        if self.step_names is StepNames.SHARED:
            async with self.changed:
                shared = self.claims.share(m.name, step_models(configs))
            if shared and m.name not in self.collided:
                self.collided.add(m.name)
                self.metrics.collisions.inc()
                other, steps = next(iter(shared.items()))
                more = f" (and {len(shared) - 1} other TargetModels)" if len(shared) > 1 else ""
                log.warning("step name collision: TargetModels %s and %s%s both hold step models %s; with SageMaker's "
                            "image (namespacing on) each load or unload of one reloads the other, which crashed "
                            "tritonserver 2.51 here: upload copies with step names of their own (`conch deploy` "
                            "stamps them), or serve with --step-names isolate", other, m.name, more, ", ".join(steps))
            return
        async with self.changed:
            renames = self.claims.plan(m.name, step_models(configs))
        if not renames:
            return
        await asyncio.to_thread(rename_steps, folder, m.name, renames, configs)
        if m.name not in self.renamed:
            self.renamed.add(m.name)
            log.info("TargetModel %s: step models renamed %s, because another TargetModel uses their names "
                     "(Triton 2.51 with namespacing reloads every copy sharing step names; --step-names shared "
                     "keeps them)", m.name, ", ".join(f"{a} -> {b}" for a, b in sorted(renames.items())))

    async def _load(self, m: Model) -> None:
        assert m.folder is not None
        start = time.monotonic()
        for _ in range(LOAD_RETRIES_ON_507):
            try:
                answer = await self.hop.load(m.name, m.folder, self.budgets.load_timeout)
            except HopTimeout:
                await self._hung(m)
                return
            if answer.status == 507 and await self._evict_one("507"):
                continue  # the platform's answer to a 507: unload the least recently used model and retry
            if answer.status == 409:  # an earlier attempt that timed out here went on inside Triton
                if await self.hop.registered(m.name):
                    break  # and has loaded it since
                await self._hung(m)  # and is still loading it
                return
            if answer.status != 200:
                self.metrics.load_failures.inc()
                hint = " (507: out of memory even after unloading others)" if answer.status == 507 else ""
                raise ModelError(f"TargetModel {m.name!r} failed to load{hint}: {answer.error_text()}",
                                 answer.status, answer.error_text())
            break
        else:
            self.metrics.load_failures.inc()
            raise ModelError(f"TargetModel {m.name!r} failed to load: still out of memory (507) after unloading "
                             f"{LOAD_RETRIES_ON_507} other models", 507, "out of memory")
        self.metrics.time("ModelLoadingTime", time.monotonic() - start)
        self.metrics.loads.labels("true" if m.loads else "false").inc()
        log.info("loaded %s in %.2f s%s", m.name, time.monotonic() - start, " (reload)" if m.loads else "")
        async with self.changed:
            m.loads += 1
            m.state = State.LOADED
            m.inflight += 1  # the invocation that asked for the load; no eviction can slip in before it runs
            m.last_used = time.monotonic()
            self._count()
            self.changed.notify_all()

    async def _hung(self, m: Model) -> None:
        self.metrics.load_failures.inc()
        timeout = self.budgets.load_timeout
        error = ModelError(
            f"TargetModel {m.name!r} did not load within {timeout:g} s (--load-timeout) and is still loading inside "
            "Triton; a Python-backend load can hang, e.g. when its environment's Python differs from the stub's or "
            "a step's setup blocks", 504, "load timed out")
        async with self.changed:
            m.state = State.HUNG
            m.hung_at = time.monotonic()
            m.failure = error
            self.changed.notify_all()

    # -- capacity ----------------------------------------------------------------------------------------
    def _loaded_count(self) -> int:
        return sum(m.state in (State.LOADED, State.UNLOADING) for m in self.models.values())

    def _count(self) -> None:
        self.metrics.set_loaded(self._loaded_count())

    def _victim(self) -> Model | None:
        idle = [m for m in self.models.values() if m.state is State.LOADED and m.inflight == 0]
        return min(idle, key=lambda m: m.last_used) if idle else None

    def _memory_needed(self, used: int) -> bool:
        """Whether one more model would pass the memory budget, by the mean cost of those loaded."""
        budget = self.budgets.memory
        if not budget:
            return False
        loaded = self._loaded_count()
        per_model = max(0, used - self.baseline_memory) // loaded if loaded else 0
        return used + per_model > budget

    async def _reserve_slot(self, m: Model) -> None:
        """Unload least recently used models until one more fits; then count ``m`` as loading."""
        while True:
            used = await asyncio.to_thread(self.memory_probe) if self.budgets.memory else 0
            if used:
                self.metrics.memory.set(used)
            async with self.changed:
                over_count = bool(self.budgets.max_loaded) and (
                    self._loaded_count() + self.loading >= (self.budgets.max_loaded or 0))
                over_memory = self._memory_needed(used)
                if not over_count and not over_memory:
                    self.loading += 1
                    return
                victim = self._victim()
                if victim is None:
                    if not over_count and self._loaded_count() + self.loading == 0:
                        log.warning("memory budget reached with no model loaded; loading %s anyway", m.name)
                        self.loading += 1
                        return
                    # every loaded model is answering a request: wait until one is idle
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(self.changed.wait(), WAIT_FOR_SLOT_S)
                    continue
                victim.state = State.UNLOADING
            await self._unload(victim, "memory" if over_memory and not over_count else "max_loaded")

    async def _evict_one(self, reason: str) -> bool:
        async with self.changed:
            victim = self._victim()
            if victim is None:
                return False
            victim.state = State.UNLOADING
        await self._unload(victim, reason)
        return True

    async def _unload(self, m: Model, reason: str) -> None:
        start = time.monotonic()
        try:
            answer = await self.hop.unload(m.name)
            if answer.status not in (200, 404):
                log.warning("unloading %s: HTTP %s %s", m.name, answer.status, answer.error_text())
        except HopError as exc:
            log.warning("unloading %s failed: %r", m.name, exc)
        self.metrics.time("ModelUnloadingTime", time.monotonic() - start)
        self.metrics.unloads.labels(reason).inc()
        log.info("unloaded %s (%s) in %.2f s", m.name, reason, time.monotonic() - start)
        async with self.changed:
            m.state = State.ON_DISK
            self._count()
            self.changed.notify_all()

    # -- the server's restarts ------------------------------------------------------------------------------
    async def server_lost(self, why: str) -> None:
        """tritonserver exited: nothing is loaded any more; loads wait for ``server_back`` (or fail)."""
        async with self.changed:
            self.down = why
            self.server_up.clear()
            for m in self.models.values():
                if m.state in (State.LOADED, State.HUNG):  # loads and unloads under way fail on their own
                    m.state, m.failure = State.ON_DISK, None
            self._count()
            self.changed.notify_all()

    async def server_back(self, sagemaker_url: str) -> None:
        await self.hop.rebind(sagemaker_url)
        async with self.changed:
            self.down = None
            self.server_up.set()
            self.changed.notify_all()

    async def server_gone(self, why: str) -> None:
        """tritonserver is not restarted again: every load fails at once with ``why``."""
        async with self.changed:
            self.down, self.gone = why, True
            self.server_up.set()  # wake waiting loads, which then fail
            self.changed.notify_all()

    async def _wait_for_server(self, m: Model) -> None:
        if not self.server_up.is_set():
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.server_up.wait(), WAIT_FOR_SERVER_S)
        if self.gone:
            raise EndpointError(f"TargetModel {m.name!r} cannot load: tritonserver {self.down}")
        if not self.server_up.is_set():
            raise EndpointError(f"TargetModel {m.name!r} cannot load: tritonserver {self.down} and is not back after "
                                f"{WAIT_FOR_SERVER_S:g} s of restarting; see the endpoint's log")

    async def unreachable(self, target_model: str, exc: HopError) -> EndpointError:
        """What to answer when tritonserver did not: a restart under way, or a server that stalled. The kernel
        closes a dying server's connections before the server can be seen exited (reaped), so a server that still
        looks alive is given ``DYING_S`` to be seen so: under load, the call otherwise said "did not answer"
        (an InternalFailure 500, which boto3 retries) for a server that had been killed."""
        deadline = time.monotonic() + DYING_S
        while self.down is None and self.server_alive() and time.monotonic() < deadline:
            await asyncio.sleep(DYING_POLL_S)
        if self.down is None and self.server_alive():
            return EndpointError(self.hop.unreachable(target_model, exc))
        if self.gone:
            return EndpointError(f"TargetModel {target_model!r}: tritonserver {self.down}")
        why = f" ({self.down})" if self.down else ""
        return ModelError(f"TargetModel {target_model!r}: tritonserver exited while serving it{why}; the local MME "
                          f"restarts it and loads {target_model!r} again on its next call: retry the call", 503,
                          "tritonserver exited and is restarted")

    # -- disk --------------------------------------------------------------------------------------------
    def _update_disk(self) -> None:
        self.metrics.disk.set(sum(m.disk_bytes for m in self.models.values() if m.folder is not None))

    async def _trim_disk(self) -> None:
        """Delete unpacked files of unloaded models, least recently used first, while past the disk budget;
        files of loaded (or loading) models stay."""
        budget = self.budgets.disk
        if not budget:
            return
        while True:
            async with self.changed:
                held = [m for m in self.models.values() if m.folder is not None]
                if sum(m.disk_bytes for m in held) <= budget:
                    return
                idle = [m for m in held if m.state is State.ON_DISK]
                if not idle:
                    return
                victim = min(idle, key=lambda m: m.last_used)
                folder, victim.folder, victim.disk_bytes, victim.state = victim.folder, None, 0, State.REMOTE
                self.claims.release(victim.name)
            assert folder is not None
            await asyncio.to_thread(self.disk.remove, folder)
            self.metrics.disk_evictions.inc()
            self._update_disk()

    def loaded(self) -> list[str]:
        return sorted(m.name for m in self.models.values() if m.state is State.LOADED)
