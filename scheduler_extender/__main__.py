"""fluence-extender: the kube-scheduler extender that places pods with Fluxion."""

from __future__ import annotations

import asyncio
import logging
import socket
import sys
import threading
import uuid
from collections.abc import Callable
from pathlib import Path

from fluence import names, resources, telemetry
from fluence.cluster_graph import ClusterGraph
from fluence.events import EventRecorder, api_poster
from fluence.kube_client import api_client
from fluence.ledger import Ledger
from fluence.reflectors import ClusterReflectors
from fluence.scheduling import backfill
from fluence.scheduling.record import SealKeyError, load_seal
from fluence.serving import TLSFiles, run, serve_app
from fluence.settings import parse_command_line
from fluence.untrusted import UntrustedObjects
from scheduler_extender.access import KubeAccessReviewer
from scheduler_extender.app import create_app
from scheduler_extender.binder import ApiBinder
from scheduler_extender.cluster_watch import (
    ClusterWatch,
    ConfigReloader,
    freeze_startup_heap,
    thaw_heap,
)
from scheduler_extender.eviction import ApiEvictor
from scheduler_extender.gated_queue import GatedQueue
from scheduler_extender.leadership import AlwaysLeader, LeaseElector
from scheduler_extender.podgroup_cleanup import PodGroupCleanup, api_podgroup_deleter
from scheduler_extender.qrmi_acquisition import Acquisitions, QrmiLibrary, api_secret_reader
from scheduler_extender.requeue import Requeuer, api_condition_writer
from scheduler_extender.scheduling import Scheduler
from scheduler_extender.settings import ExtenderSettings

log = logging.getLogger("fluence.extender")

WATCH_CONNECTIONS = 4
"""Watch streams the cluster cache holds open: nodes, pods and two PodGroup APIs."""

SPARE_CONNECTIONS = 2
"""Room for the reflectors' re-lists beside their watches."""

GIL_SWITCH_INTERVAL_S = 0.0005
"""How long a busy thread may keep the GIL when another thread wants it (Python's default: 5 ms).

Filter runs on the event loop, which gives the GIL up on every socket read and
write and matcher call; behind a bind or reflector thread, getting it back
would otherwise wait out the whole default interval each time.
"""


def main(argv: list[str] | None = None) -> None:
    parse_command_line(
        ExtenderSettings,
        "fluence-extender",
        "The kube-scheduler extender of fluence: filter, prioritize, bind and preempt for the "
        "pods of the fluence profile, placed by the Fluxion matcher.",
        argv,
    )
    settings = ExtenderSettings()
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
    telemetry.setup("fluence-extender")
    try:
        config = resources.load(settings.resources or None)
    except resources.ResourcesConfigError as exc:
        raise SystemExit(f"FLUENCE_RESOURCES={settings.resources}: {exc}") from exc
    api = api_client(settings.kubeconfig, connections=WATCH_CONNECTIONS + SPARE_CONNECTIONS)
    cache = ClusterReflectors(api)
    topology = [k.strip() for k in settings.topology_keys.split(",") if k.strip()]
    graph = ClusterGraph(
        config,
        policy=settings.match_policy,
        topology=topology,
        device_backed=lambda: cache.devices.backing().keys(),
    )
    try:
        seal = load_seal(settings.record_key_file)
    except SealKeyError as exc:
        raise SystemExit(f"FLUENCE_RECORD_KEY_FILE: {exc}") from exc
    events = EventRecorder(api_poster(api)).start()
    ledger = Ledger(
        graph,
        unbound_timeout=settings.unbound_timeout,
        gang_timeout=settings.gang_timeout,
        seal=seal,
        events=events,
        default_runtime=settings.default_runtime,
        backfill=backfill.named(settings.backfill, settings.reserve_depth),
        spread=settings.spread,
    )
    runtime = ClusterWatch(cache, graph, ledger, UntrustedObjects(events))
    binder = ApiBinder(api.configuration, connections=settings.bind_concurrency)
    scheduler = Scheduler(
        graph,
        ledger,
        cache,
        binder,
        scheduler_name=settings.scheduler_name,
        evictor=ApiEvictor(api, events) if settings.preemption else None,
    )
    acquisitions = Acquisitions(
        QrmiLibrary(settings.qrmi_python),
        lambda: {q.name: q for q in graph.config.qrmi},
        api_secret_reader(api, settings.qrmi_credentials_namespace),
        seal,
        warn=lambda pod, reason, message: events.warn(
            pod.metadata.namespace, pod.metadata.name, pod.metadata.uid, reason, message
        ),
    )
    gated = GatedQueue(
        scheduler,
        binder,
        evictor=ApiEvictor(api, events),
        retry_limit=settings.queue_retry_limit,
        conditions=api_condition_writer(api),
        acquisitions=acquisitions,
        storage=cache.storage,
        devices=cache.devices,
        namespaces=cache.namespace_labels,
    )
    if settings.queue:
        cache.pods.add_handler(gated.on_pod)
        # A node added, a claim bound, a volume made, a device published or a namespace
        # labelled may let a waiting pod go.
        for store in (
            cache.nodes,
            cache.claims,
            cache.volumes,
            cache.storage_classes,
            cache.csi_nodes,
            cache.attachments,
            cache.resource_claims,
            cache.resource_slices,
            cache.device_classes,
            cache.namespaces,
        ):
            store.add_handler(gated.on_change)
    leadership: LeaseElector | AlwaysLeader = AlwaysLeader()
    if settings.queue and settings.queue_lease_namespace:
        identity = settings.queue_identity or socket.gethostname()
        leadership = LeaseElector(
            api,
            settings.queue_lease_namespace,
            names.QUEUE_LEASE,
            f"{identity}_{uuid.uuid4()}",
            duration=settings.queue_lease_seconds,
        )
    startup_failed = threading.Event()
    app = create_app(
        scheduler,
        max_body_bytes=settings.max_body_bytes,
        ready=runtime.ready.is_set,
        alive=lambda: not startup_failed.is_set(),
        remote=KubeAccessReviewer(api),
        queued=lambda: gated.waiting,
    )
    watcher = ConfigReloader(settings.resources, graph, ledger) if settings.resources else None

    def start() -> None:
        try:
            cache.start()
            cache.wait_synced()
            runtime.rebuild()
            freeze_startup_heap()
        except Exception:
            log.exception("startup failed; /healthz now fails so the container is restarted")
            startup_failed.set()

    cleanup = PodGroupCleanup(
        lambda: [g for r in cache.podgroups for g in r.items()],
        cache.pods.items,
        api_podgroup_deleter(api),
    )

    def remove_bare_podgroups() -> None:
        if settings.queue and leadership.leader:
            cleanup.step()

    async def housekeeping() -> None:
        steps: list[Callable[[], object]] = [
            ledger.expire,
            graph.prepare_satisfiability,
            remove_bare_podgroups,
        ]
        if watcher is not None:
            steps.append(watcher.check)
        while True:
            await asyncio.sleep(settings.expire_interval)
            if not runtime.ready.is_set():
                continue
            for step in steps:
                # One failing step must not end the loop (expiry would stop for good).
                try:
                    await asyncio.to_thread(step)
                except Exception:
                    log.exception("housekeeping step failed", extra={"step": step.__qualname__})

    requeuer = Requeuer(ledger, api_condition_writer(api))

    async def requeue() -> None:
        while settings.requeue_interval > 0:
            await asyncio.sleep(settings.requeue_interval)
            if not runtime.ready.is_set():
                continue
            try:
                await asyncio.to_thread(requeuer.check)
            except Exception:
                log.exception("looking for groups that fit now failed")

    async def queue() -> None:
        if settings.queue:
            await asyncio.gather(leadership.run(), gated.run(runtime.ready.is_set, leadership))

    async def binder_connections() -> None:
        """Closes the Binding connections when the server stops."""
        try:
            await asyncio.Event().wait()
        finally:
            await binder.close()

    threading.Thread(target=start, name="startup", daemon=True).start()
    tls = TLSFiles(Path(settings.tls_cert), Path(settings.tls_key)) if settings.tls_cert else None
    log.info(
        "starting",
        extra={
            "bind": settings.bind,
            "policy": settings.match_policy,
            "resources": settings.resources or None,
            "scheduler_name": settings.scheduler_name,
        },
    )
    try:
        run(
            serve_app(
                app,
                settings.bind,
                tls_files=tls,
                background=[housekeeping, requeue, queue, binder_connections],
                http2=settings.http2,
            ),
            settings.event_loop,
        )
    finally:
        cache.stop()
        thaw_heap()


if __name__ == "__main__":
    main()
