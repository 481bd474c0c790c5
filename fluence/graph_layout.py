"""How the cluster is written as a Fluxion graph (JGF): which vertex stands for what.

JGF conventions follow the Go fluence (see the module docs of the project):
one ``cluster`` root; one ``node`` vertex per Kubernetes node, named after it,
with property ``virtual=false`` and pooled ``core`` (allocatable millicores),
``memory`` (MiB, rounded down) and ``gpu`` children; every configured virtual
resource at every depth is a vertex of type ``node`` (basename = its type) with
``virtual=true``, ``class=<t>`` for every type in its subtree and
``fluxion.flux-framework.org/<k>=<v>`` for its attributes and top-level
backend. Pools are matched in partial-pool mode so many pods share a node.

Topology levels sit between the root and the nodes: for each configured node
label key, in order (zone, then rack by default), a vertex typed after the key's
last segment and named after the label's value, so a node labelled
``zone=a, rack=r1`` lives at ``/cluster/a/r1/<node>``. A node without one of
the labels hangs from the deepest level it has.

This unit owns the vertex ids, the level vertices and the index of where each
node and backend lives; it never matches, holds or times anything (that is
:mod:`fluence.cluster_graph`, which loads what this writes).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec

from fluence import names
from fluence.node_rules import schedulable
from fluence.pods import COMPUTE_TYPES, CORE, GPU, MEMORY, Node, node_capacity
from fluence.resources import Resource, ResourcesConfig

CLUSTER = "cluster"
_UNITS = {CORE: "", MEMORY: "MiB", GPU: ""}

Vertex = dict[str, Any]
Edge = dict[str, Any]


def jgf_text(jgf: Mapping[str, Any]) -> str:
    """JGF as text for the matcher; msgspec holds the GIL a third as long as json.dumps."""
    return msgspec.json.encode(jgf).decode()


def level_type(key: str) -> str:
    """The vertex type of a topology key's level: its last segment (``zone``, ``rack``)."""
    return key.rsplit("/", 1)[-1].lower()


@dataclass
class PoolVertex:
    uid: str
    type: str
    name: str
    path: str
    size: int


@dataclass
class NodeVertices:
    """Where one Kubernetes node lives in the graph."""

    uid: str
    path: str
    capacity: dict[str, int]
    pools: dict[str, PoolVertex] = field(default_factory=dict)
    down: bool = False
    deleted: bool = False
    node: Node | None = None


@dataclass(frozen=True)
class Backend:
    """A top-level virtual resource (e.g. a quantum device) a device match can land on."""

    uid: str
    name: str
    path: str
    types: frozenset[str]
    attributes: Mapping[str, str]


def virtual_properties(res: Resource) -> dict[str, str]:
    """RFC 31 properties of a virtual vertex: presence-tested keys with values folded in."""
    props = {names.PROPERTY_VIRTUAL_TRUE: ""}
    for t in res.subtree_types():
        props[names.PROPERTY_CLASS_PREFIX + t] = ""
    for k, v in res.attributes.items():
        if k != names.ATTR_BACKEND and v != "":
            props[names.attr_property(k, v)] = ""
    if res.backend:
        props[names.attr_property(names.ATTR_BACKEND, res.backend)] = ""
    return props


def virtual_names(config: ResourcesConfig) -> set[str]:
    """Names of the resources that sit beside the nodes, under the cluster vertex."""
    return {r.name for r in config.resources if r.parent in ("", CLUSTER) and r.name}


def _edge(src: str, tgt: str) -> Edge:
    return {"source": src, "target": tgt, "metadata": {"subsystem": "containment"}}


class _Ids:
    """Hands out JGF vertex ids, per-basename indices and ranks the way the Go builder does."""

    def __init__(self) -> None:
        self.next_uid = 0
        self.next_rank = 0
        self.per_basename: dict[str, int] = {}

    def vertex(
        self,
        typ: str,
        basename: str,
        name: str,
        path_parent: str,
        *,
        size: int = 1,
        unit: str = "",
        rank: bool = False,
        flat: Mapping[str, Any] | None = None,
        properties: Mapping[str, str] | None = None,
    ) -> Vertex:
        idx = self.per_basename.get(basename, 0)
        self.per_basename[basename] = idx + 1
        uid = self.next_uid
        self.next_uid += 1
        r = -1
        if rank:
            r = self.next_rank
            self.next_rank += 1
        vname = name or f"{basename}{idx}"
        md: dict[str, Any] = {
            "basename": basename,
            "exclusive": False,
            "id": idx,
            "name": vname,
            "paths": {"containment": f"{path_parent}/{vname}"},
            "rank": r,
            "size": max(size, 1) if size else 1,
            "type": typ,
            "uniq_id": uid,
            "unit": unit,
        }
        for k, v in (flat or {}).items():
            md.setdefault(k, v)
        if properties:
            md["properties"] = dict(sorted(properties.items()))
        return {"id": str(uid), "metadata": dict(sorted(md.items()))}


def _path(v: Vertex) -> str:
    path: str = v["metadata"]["paths"]["containment"]
    return path


class GraphLayout:
    """One build of the cluster's JGF and the index into it; grows node by node.

    ``jgf``, ``nodes`` and ``backends`` are the live objects: a node added or
    removed changes them in place.
    """

    def __init__(self, config: ResourcesConfig, topology_keys: Iterable[str]) -> None:
        self.config = config
        self.topology_keys = tuple(topology_keys)
        self._ids = _Ids()
        self.root = self._ids.vertex(CLUSTER, CLUSTER, CLUSTER, "")
        self._levels: dict[str, Vertex] = {}
        self.nodes: dict[str, NodeVertices] = {}
        self.backends: dict[str, Backend] = {}
        self.jgf: dict[str, Any] = {"graph": {"nodes": [self.root], "edges": []}}

    def level_path(self, node: Node) -> list[tuple[str, str]]:
        """(type, label value) of each topology level the node has, outermost first."""
        labels = node.metadata.labels
        return [(level_type(k), labels[k]) for k in self.topology_keys if labels.get(k)]

    def add_virtual_resources(self) -> None:
        """The configured resources that hang from the cluster vertex (after the nodes)."""
        for res in self.config.resources:
            if res.parent in ("", CLUSTER):
                verts, edges = self._virtual_subgraph(res, self.root)
                self._extend(verts, edges)

    def add_node(self, node: Node) -> dict[str, Any]:
        """Lay out ``node`` (its new levels and the resources configured on it).

        Returns the subgraph to attach to a loaded graph: the root, the levels
        above it that already exist, and the new vertices and edges.
        """
        parent, above, verts, edges = self._levels_for(node)
        cap = node_capacity(node)
        nv_json = self._ids.vertex(
            "node",
            "node",
            node.name,
            _path(parent),
            rank=True,
            flat={"hostname": node.name},
            properties={names.PROPERTY_VIRTUAL_FALSE: ""},
        )
        path = _path(nv_json)
        nv = NodeVertices(uid=nv_json["id"], path=path, capacity=cap, node=node)
        nv.down = not schedulable(node)
        verts.append(nv_json)
        edges.append(_edge(parent["id"], nv.uid))
        for t in COMPUTE_TYPES:
            size = cap.get(t, 0)
            if size <= 0:
                continue
            pj = self._ids.vertex(t, t, "", path, size=size, unit=_UNITS[t])
            md = pj["metadata"]
            nv.pools[t] = PoolVertex(pj["id"], t, md["name"], _path(pj), size)
            verts.append(pj)
            edges.append(_edge(nv.uid, pj["id"]))
        for res in self.config.resources:
            if res.parent == node.name:
                v, e = self._virtual_subgraph(res, nv_json)
                verts += v
                edges += e
        self.nodes[node.name] = nv
        self._extend(verts, edges)
        return {"graph": {"nodes": [self.root, *above, *verts], "edges": edges}}

    def remove_node(self, name: str) -> NodeVertices:
        """Take the node, its pools and the backends configured on it out of the layout."""
        nv = self.nodes.pop(name)
        gone = {nv.uid, *(p.uid for p in nv.pools.values())}
        graph = self.jgf["graph"]
        graph["nodes"] = [v for v in graph["nodes"] if v["id"] not in gone]
        graph["edges"] = [e for e in graph["edges"] if e["target"] not in gone]
        for path in [p for p in self.backends if p.startswith(nv.path + "/")]:
            del self.backends[path]
        return nv

    def _extend(self, verts: list[Vertex], edges: list[Edge]) -> None:
        self.jgf["graph"]["nodes"] += verts
        self.jgf["graph"]["edges"] += edges

    def _levels_for(self, node: Node) -> tuple[Vertex, list[Vertex], list[Vertex], list[Edge]]:
        """The node's parent vertex, the level vertices above it that exist already, and
        the level vertices and edges to add for it."""
        parent = self.root
        existing: list[Vertex] = []
        verts: list[Vertex] = []
        edges: list[Edge] = []
        for typ, value in self.level_path(node):
            path = f"{_path(parent)}/{value}"
            found = self._levels.get(path)
            if found is None:
                found = self._ids.vertex(typ, typ, value, _path(parent))
                self._levels[path] = found
                verts.append(found)
                edges.append(_edge(parent["id"], found["id"]))
            elif not verts:
                existing.append(found)
            parent = found
        return parent, existing, verts, edges

    def _virtual_subgraph(
        self, res: Resource, parent: Vertex, top: bool = True
    ) -> tuple[list[Vertex], list[Edge]]:
        vj = self._ids.vertex(
            "node",
            res.type,
            res.name,
            _path(parent),
            size=res.count,
            rank=True,
            properties=virtual_properties(res),
        )
        verts = [vj]
        edges = [_edge(parent["id"], vj["id"])]
        if top:
            attrs = dict(res.attributes)
            if res.backend:
                attrs.setdefault(names.ATTR_BACKEND, res.backend)
            self.backends[_path(vj)] = Backend(
                vj["id"],
                vj["metadata"]["name"],
                _path(vj),
                frozenset(res.subtree_types()),
                attrs,
            )
        for child in res.children:
            v, e = self._virtual_subgraph(child, vj, top=False)
            verts += v
            edges += e
        return verts, edges
