"""fluence-extender with the inspection routes mounted, and helpers for its e2e tests.

Runs the real entry point; the only difference is that ``create_app`` also
serves :func:`scheduler_extender.inspect.inspect_routes` when the app does not
mount them itself yet. ``python -m tests.support.extender`` from the repo root.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from typing import Any, Protocol

from kubernetes.client import CustomObjectsApi
from starlette.applications import Starlette

import scheduler_extender.__main__ as entry
from fluence import names
from scheduler_extender.app import create_app
from scheduler_extender.inspect import inspect_routes
from scheduler_extender.scheduling import Scheduler
from testbed import ControlPlane, SchedulerHandle
from testbed.cluster import selected_release
from testbed.schedconfig import scheduler_config

SUITE_LABEL = "fluence-e2e/suite"


class ExtenderProcess(Protocol):
    url: str

    def start(self) -> None: ...

    def kill(self, sig: int = ...) -> None: ...


@contextlib.contextmanager
def fluence_scheduler(
    control_plane: ControlPlane, extender: ExtenderProcess
) -> Iterator[SchedulerHandle]:
    """Start ``extender``, KWOK and a kube-scheduler delegating to it.

    On exit the scheduler is stopped and the extender is sent SIGTERM.
    """
    scheduler: SchedulerHandle | None = None
    try:
        extender.start()
        control_plane.start_kwok()
        # --v=4: why each pod waits (gang quorum, extender verdicts) is in its log.
        scheduler = control_plane.start_scheduler(
            scheduler_config(extender.url), name="fluence", extra_args=["--v=4"]
        )
        yield scheduler
    finally:
        if scheduler is not None:
            control_plane.stop_scheduler(scheduler)
        extender.kill(signal.SIGTERM)


def pod_body(
    name: str,
    requests: dict[str, str],
    suite: str,
    *,
    group: str | None = None,
    metadata: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A busybox Pod for the fluence scheduler, pinned to the nodes labelled with ``suite``."""
    spec: dict[str, Any] = {
        "schedulerName": names.SCHEDULER_NAME,
        "nodeSelector": {SUITE_LABEL: suite},
        "containers": [
            {
                "name": "app",
                "image": "busybox",
                "resources": {"requests": requests, "limits": dict(requests)},
            }
        ],
    }
    if group:
        spec["schedulingGroup"] = {"podGroupName": group}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, **(metadata or {})},
        "spec": spec,
    }


def create_podgroup(
    custom: CustomObjectsApi,
    namespace: str,
    name: str,
    min_count: int,
    *,
    owners: list[dict[str, Any]] | None = None,
    **spec: Any,
) -> None:
    """A gang PodGroup of ``min_count`` pods; ``spec`` adds fields (e.g. ``disruptionMode``),
    ``owners`` its ownerReferences."""
    version = selected_release().podgroup_version
    metadata: dict[str, Any] = {"name": name}
    if owners:
        metadata["ownerReferences"] = owners
    body = {
        "apiVersion": f"scheduling.k8s.io/{version}",
        "kind": "PodGroup",
        "metadata": metadata,
        "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}, **spec},
    }
    custom.create_namespaced_custom_object(
        "scheduling.k8s.io", version, namespace, "podgroups", body
    )


def create_app_with_inspection(scheduler: Scheduler, **kwargs: Any) -> Starlette:
    app = create_app(scheduler, **kwargs)
    served = {getattr(r, "path", "") for r in app.routes}
    if "/explain" not in served:
        app.router.routes.extend(inspect_routes(scheduler))
    return app


def main() -> None:
    # The entry point calls the factory it imported; point that name at the wrapper.
    setattr(entry, "create_app", create_app_with_inspection)  # noqa: B010
    entry.main()


if __name__ == "__main__":
    main()
