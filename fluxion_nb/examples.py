"""Small example clusters built in code, for the demo and the tests."""

from __future__ import annotations

from typing import Any


def pooled_cluster(
    nodes: int = 2, cpus_milli: int = 4000, memory_mib: int = 8192, gpus: int = 0
) -> dict[str, Any]:
    """A Kubernetes-shaped JGF: cluster -> node -> one core pool, memory pool, optional gpu pool."""
    verts: list[dict[str, Any]] = []
    edges: list[dict[str, Any]] = []

    def vtx(
        typ: str, name: str, idx: int, path: str, size: int = 1, rank: int = -1, unit: str = ""
    ) -> str:
        uid = str(len(verts))
        verts.append(
            {
                "id": uid,
                "metadata": {
                    "type": typ,
                    "basename": typ,
                    "name": name,
                    "id": idx,
                    "uniq_id": int(uid),
                    "rank": rank,
                    "size": size,
                    "unit": unit,
                    "paths": {"containment": path},
                },
            }
        )
        return uid

    def edge(s: str, t: str) -> None:
        edges.append({"source": s, "target": t, "metadata": {"subsystem": "containment"}})

    root = vtx("cluster", "cluster", 0, "/cluster")
    for n in range(nodes):
        name = f"worker{n}"
        p = f"/cluster/{name}"
        nv = vtx("node", name, n, p, rank=n)
        edge(root, nv)
        edge(nv, vtx("core", f"core{n}", n, f"{p}/core{n}", cpus_milli))
        edge(nv, vtx("memory", f"memory{n}", n, f"{p}/memory{n}", memory_mib, unit="MiB"))
        if gpus:
            edge(nv, vtx("gpu", f"gpu{n}", n, f"{p}/gpu{n}", gpus))
    return {"graph": {"nodes": verts, "edges": edges}}


def slot_jobspec(
    slots: int, cpu_milli: int, memory_mib: int, duration: int = 3600
) -> dict[str, Any]:
    """`slots` bundles of (cpu, memory): one bundle per pod of a gang."""
    return {
        "version": 1,
        "resources": [
            {
                "type": "slot",
                "count": slots,
                "label": "pod",
                "with": [
                    {"type": "core", "count": cpu_milli},
                    {"type": "memory", "count": memory_mib},
                ],
            }
        ],
        "tasks": [{"command": ["app"], "slot": "pod", "count": {"per_slot": 1}}],
        "attributes": {"system": {"duration": duration}},
    }
