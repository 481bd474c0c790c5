"""Which extender runs the queue: the holder of a coordination.k8s.io Lease.

Every replica follows the cluster and keeps its ledger current, but only one
may release gated groups, or two would place the same pods. The holder renews
the Lease every ``duration / 3`` seconds; another replica takes it over when it
has seen the same holder and renew time unchanged for ``duration`` seconds of
its own clock (as client-go's elector does, so clock skew between nodes does
not matter). A holder that cannot renew stops leading after ``duration * 2/3``,
before anyone else may start.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import time
from collections.abc import Callable
from typing import Any

from kubernetes.client import CoordinationV1Api, V1Lease, V1LeaseSpec, V1ObjectMeta
from kubernetes.client.exceptions import ApiException

from fluence import names, telemetry

log = logging.getLogger(__name__)

_leading = telemetry.meter("fluence.queue").create_up_down_counter(
    "fluence_queue_leader", description="1 while this extender runs the queue"
)


class LeaseElector:
    def __init__(
        self,
        api: Any,
        namespace: str,
        name: str,
        identity: str,
        *,
        duration: float = 15.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.leases = CoordinationV1Api(api)
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.duration = duration
        self.clock = clock
        self._observed: tuple[str, str] = ("", "")
        self._observed_at = 0.0
        self._until = 0.0
        self._was_leader = False
        self.carried: str | None = None
        """The queue's annotation as this replica last read it from the Lease."""
        self._carry: str | None = None

    def carry(self, value: str) -> None:
        """Write ``value`` (the queue's state for a successor) with the next renewal."""
        self._carry = value

    @property
    def leader(self) -> bool:
        return self.clock() < self._until

    def step(self) -> bool:
        """Acquire or renew the Lease once; whether this replica leads now."""
        started = self.clock()
        try:
            won = self._try(started)
        except ApiException as exc:
            log.warning("queue lease not renewed", extra={"lease": self.name, "status": exc.status})
            won = False
        except Exception as exc:  # noqa: BLE001 - a transport error: try again next round
            log.warning("queue lease not renewed", extra={"lease": self.name, "error": repr(exc)})
            won = False
        if won:
            self._until = started + self.duration * 2 / 3
        leading = self.leader
        if leading != self._was_leader:
            log.info(
                "queue leadership changed",
                extra={"lease": self.name, "identity": self.identity, "leader": leading},
            )
            _leading.add(1 if leading else -1)
            self._was_leader = leading
        return leading

    def _try(self, now: float) -> bool:
        stamp = dt.datetime.now(dt.UTC)
        try:
            lease = self.leases.read_namespaced_lease(self.name, self.namespace)
        except ApiException as exc:
            if exc.status != 404:
                raise
            self.carried = None
            carry = {names.ANNOTATION_GANG_TIMEOUTS: self._carry} if self._carry else None
            body = V1Lease(
                metadata=V1ObjectMeta(name=self.name, namespace=self.namespace, annotations=carry),
                spec=self._spec(stamp, stamp, 0),
            )
            try:
                self.leases.create_namespaced_lease(self.namespace, body)
            except ApiException as create_exc:
                if create_exc.status == 409:
                    return False
                raise
            return True
        meta = lease.metadata or V1ObjectMeta()
        annotations = meta.annotations or {}
        self.carried = annotations.get(names.ANNOTATION_GANG_TIMEOUTS)
        spec = lease.spec or V1LeaseSpec()
        holder = spec.holder_identity or ""
        record = (holder, str(spec.renew_time))
        if record != self._observed:
            self._observed, self._observed_at = record, now
        if holder and holder != self.identity and now - self._observed_at < self.duration:
            return False
        transitions = spec.lease_transitions or 0
        if holder == self.identity:
            lease.spec = self._spec(spec.acquire_time or stamp, stamp, transitions)
            if self._carry is not None and self._carry != self.carried:
                meta.annotations = {**annotations, names.ANNOTATION_GANG_TIMEOUTS: self._carry}
                lease.metadata = meta
        else:
            # Taking over: what the last holder left stays on the Lease for this one to read.
            lease.spec = self._spec(stamp, stamp, transitions + 1)
        try:
            self.leases.replace_namespaced_lease(self.name, self.namespace, lease)
        except ApiException as exc:
            if exc.status == 409:
                return False
            raise
        self._observed, self._observed_at = (self.identity, str(stamp)), now
        return True

    def _spec(self, acquired: dt.datetime, renewed: dt.datetime, transitions: int) -> V1LeaseSpec:
        return V1LeaseSpec(
            holder_identity=self.identity,
            lease_duration_seconds=max(1, round(self.duration)),
            acquire_time=acquired,
            renew_time=renewed,
            lease_transitions=transitions,
        )

    async def run(self) -> None:
        """Keep the Lease (or keep trying to take it) until cancelled; then let it go, so
        another replica takes over without waiting for it to expire."""
        try:
            while True:
                await asyncio.to_thread(self.step)
                await asyncio.sleep(self.duration / 3)
        finally:
            if self.leader:
                self._until = 0.0
                await asyncio.to_thread(self.resign)

    def resign(self) -> None:
        """Hand the Lease back (an empty holder); errors are logged, the Lease then expires."""
        try:
            lease = self.leases.read_namespaced_lease(self.name, self.namespace)
            if lease.spec is None or lease.spec.holder_identity != self.identity:
                return
            lease.spec.holder_identity = None
            lease.spec.lease_duration_seconds = 1
            self.leases.replace_namespaced_lease(self.name, self.namespace, lease)
            log.info("queue lease given up", extra={"lease": self.name})
        except Exception as exc:  # noqa: BLE001 - shutting down: the Lease expires anyway
            log.warning("queue lease not given up", extra={"lease": self.name, "error": repr(exc)})


class AlwaysLeader:
    """A single extender without a Lease (tests, benchmarks, one replica by design)."""

    leader = True
    carried: str | None = None

    def carry(self, value: str) -> None:
        """Nowhere to carry it: one replica keeps its counts in memory."""

    async def run(self) -> None:
        await asyncio.Event().wait()
