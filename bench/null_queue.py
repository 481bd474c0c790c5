"""The smallest queue of gated pods: it decides nothing, and lifts the gate.

It follows pods with fluence's own pod reflector and, for every pod that carries
the queue's scheduling gate ``fluence.flux-framework.org/queue``, writes the one
JSON patch fluence's queue writes to release a pod (through fluence's
:class:`~scheduler_extender.binder.ApiBinder`, with the pod's UID and the gate's
place tested) minus what a decision adds: no record, no pinned node. kube-scheduler
then places the pod with its own plugins, as if it had never been gated.

It is the baseline the ``null-queue`` rule of the cluster benches measures: what
gating a pod at admission and releasing it costs in itself (one more watch event
and one more write per pod in the API server), so "queue / null-queue" is what
fluence's decisions cost on top of being a gated queue at all. Usage::

    python bench/null_queue.py --kubeconfig FILE
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fluence import names  # noqa: E402
from fluence.kube_client import api_client  # noqa: E402
from fluence.pods import Pod, decode_pod  # noqa: E402
from fluence.reflectors import DELETED, RawApi, Reflector  # noqa: E402
from scheduler_extender.binder import ApiBinder  # noqa: E402
from scheduler_extender.scheduling import BindOutcomeUnknown, ReleaseRefused  # noqa: E402

CONNECTIONS = 16


def ungate_ops(pod: Pod) -> list[dict[str, object]]:
    """Lift the queue's gate and nothing else; fails on a recreated pod or a moved gate."""
    index = [g.name for g in pod.spec.scheduling_gates or ()].index(names.QUEUE_GATE)
    gate = f"/spec/schedulingGates/{index}"
    return [
        {"op": "test", "path": "/metadata/uid", "value": pod.metadata.uid},
        {"op": "test", "path": gate, "value": {"name": names.QUEUE_GATE}},
        {"op": "remove", "path": gate},
    ]


async def serve(kubeconfig: str) -> None:
    api = api_client(kubeconfig)
    writer = ApiBinder(api.configuration, connections=CONNECTIONS)
    loop = asyncio.get_running_loop()
    todo: asyncio.Queue[Pod] = asyncio.Queue()
    sent: set[str] = set()

    def on_pod(kind: str, pod: Pod) -> None:
        if kind != DELETED and pod.gated_by(names.QUEUE_GATE) and pod.metadata.uid not in sent:
            sent.add(pod.metadata.uid)
            loop.call_soon_threadsafe(todo.put_nowait, pod)

    async def release(pod: Pod) -> None:
        try:
            await writer.release(pod.metadata.namespace, pod.metadata.name, ungate_ops(pod))
        except (ReleaseRefused, BindOutcomeUnknown) as exc:
            print(f"not released: {pod.key}: {exc}", file=sys.stderr, flush=True)

    pods = Reflector(
        RawApi(api), "/api/v1/pods", decode_pod, lambda p: p.key, name="pods", kind="Pod"
    )
    pods.add_handler(on_pod)
    pods.start()
    print("null queue following pods", file=sys.stderr, flush=True)
    tasks: set[asyncio.Task[None]] = set()
    while True:
        task = asyncio.create_task(release(await todo.get()))
        tasks.add(task)
        task.add_done_callback(tasks.discard)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", required=True)
    args = parser.parse_args()
    asyncio.run(serve(args.kubeconfig))


if __name__ == "__main__":
    main()
