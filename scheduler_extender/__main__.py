"""fluence-extender: the kube-scheduler extender that places pods with Fluxion."""

from __future__ import annotations

import asyncio
import logging
import threading
from pathlib import Path
from typing import Any

from fluence import resources, telemetry
from fluence.cluster import ClusterCache
from fluence.graph import ClusterGraph
from fluence.ledger import Ledger
from fluence.serving import TLSFiles, serve_app
from scheduler_extender.app import create_app
from scheduler_extender.binder import ApiBinder
from scheduler_extender.runtime import ConfigWatcher, Runtime
from scheduler_extender.scheduling import Scheduler
from scheduler_extender.settings import ExtenderSettings

log = logging.getLogger("fluence.extender")


def api_client(kubeconfig: str) -> Any:
    from kubernetes import client, config

    if kubeconfig:
        return config.new_client_from_config(config_file=kubeconfig)  # type: ignore[no-untyped-call]
    config.load_incluster_config()  # type: ignore[no-untyped-call]
    return client.ApiClient()


def main() -> None:
    settings = ExtenderSettings()
    telemetry.setup("fluence-extender")
    try:
        config = resources.load(settings.resources or None)
    except resources.ResourcesConfigError as exc:
        raise SystemExit(f"FLUENCE_RESOURCES={settings.resources}: {exc}") from exc
    api = api_client(settings.kubeconfig)
    cache = ClusterCache(api)
    graph = ClusterGraph(config, policy=settings.match_policy)
    ledger = Ledger(graph, unbound_timeout=settings.unbound_timeout)
    runtime = Runtime(cache, graph, ledger)
    scheduler = Scheduler(
        graph, ledger, cache, ApiBinder(api), scheduler_name=settings.scheduler_name
    )
    app = create_app(scheduler, max_body_bytes=settings.max_body_bytes, ready=runtime.ready.is_set)
    watcher = ConfigWatcher(settings.resources, graph, ledger) if settings.resources else None

    def start() -> None:
        cache.start()
        cache.wait_synced()
        runtime.rebuild()

    async def housekeeping() -> None:
        while True:
            await asyncio.sleep(settings.expire_interval)
            if runtime.ready.is_set():
                await asyncio.to_thread(ledger.expire)
                if watcher is not None:
                    await asyncio.to_thread(watcher.check)

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
        asyncio.run(serve_app(app, settings.bind, tls_files=tls, background=[housekeeping]))
    finally:
        cache.stop()


if __name__ == "__main__":
    main()
