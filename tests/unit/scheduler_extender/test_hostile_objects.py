"""Nothing a tenant writes takes the extender down or moves another tenant's pods.

Each object from the cluster is taken in on its own (fluence.untrusted): the
startup rebuild and the watch go on past one that fails, which is logged,
counted and reported once as an Event.
"""

from __future__ import annotations

import json
from typing import Any

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, event, given, settings

from fluence import names, resources, untrusted
from fluence.cluster_graph import ClusterGraph
from fluence.events import ObjectRef
from fluence.ledger import Ledger
from fluence.pods import Node, Pod, decode_node, decode_pod
from fluence.reflectors import ADDED, MODIFIED, Reflector
from fluence.scheduling.holdings import COMMITTED, FOREIGN
from fluence.scheduling.record import RecordSeal
from fluence.untrusted import UntrustedObjects
from scheduler_extender.cluster_watch import ClusterWatch
from tests.unit.fluence.test_ledger import bound
from tests.unit.fluence.test_pods import make_node, make_pod
from tests.unit.scheduler_extender.test_cluster_watch import FakeCache

EXAMPLES = resources.load("examples/resources.yaml")
QPU = {names.resource_name("qpu"): "1"}


class Recorded:
    """Events as the recorder would post them: (kind, namespace, name, reason)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, str, str]] = []

    def warn(self, namespace: str, name: str, uid: str, reason: str, message: str) -> None:
        self.events.append(("Pod", namespace, name, reason))

    def warn_about(self, about: ObjectRef, reason: str, message: str) -> None:
        self.events.append((about.kind, about.namespace, about.name, reason))


def hostile_seal_pod(seal: str) -> Pod:
    notes = {names.ANNOTATION_ALLOCATION: "{}", names.ANNOTATION_ALLOCATION_SEAL: seal}
    return make_pod("evil", ns="mallory", node="a", phase="Running", annotations=notes)


@pytest.mark.parametrize("seal", ["é", "\u202e", "０" * 64, "💥", "\x00"])
def test_a_non_ascii_seal_is_an_untrusted_record_not_a_crash(seal: str) -> None:
    ledger = Ledger(ClusterGraph(EXAMPLES, [make_node("a")]))
    ledger.observe(hostile_seal_pod(seal))
    held = ledger.get("mallory/evil")
    assert held is not None and held.state == FOREIGN
    assert not RecordSeal(b"k" * 32).verify("mallory/evil", "uid", "{}", seal)


@pytest.mark.parametrize("cpu", ["1e18", "9223372036854775808", "1e30", "1E"])
def test_a_bound_pod_asking_more_than_any_node_is_unaccounted_not_a_crash(cpu: str) -> None:
    graph = ClusterGraph(EXAMPLES, [make_node("a", cpu="4")])
    ledger = Ledger(graph)
    ledger.observe(make_pod("huge", ns="mallory", cpu=cpu, node="a", phase="Running"))
    assert ledger.recovery.unaccounted() == ["mallory/huge"]
    assert graph.node_usage()["a"]["core"]["allocated"] == 0
    ok = ledger.place("tenant/p", [make_pod("p", ns="tenant", cpu="4")])
    assert ok.status == "allocated"


class Failing(Ledger):
    """A ledger whose handling of one pod fails, as an unforeseen fault would."""

    def observe(self, pod: Pod) -> None:
        if pod.metadata.name == "poison":
            raise RuntimeError("unforeseen")
        super().observe(pod)


def test_the_rebuild_and_the_watch_go_on_past_a_pod_that_fails() -> None:
    poison = make_pod("poison", ns="mallory", node="a", phase="Running", uid="u-poison")
    fine = make_pod("fine", ns="tenant", cpu="1", node="a", phase="Running", scheduler="x")
    cache = FakeCache([make_node("a", cpu="4")], [poison, fine])
    graph = ClusterGraph(EXAMPLES)
    ledger = Failing(graph)
    events = Recorded()
    rt = ClusterWatch(cache, graph, ledger, UntrustedObjects(events))  # type: ignore[arg-type]
    rt.rebuild()
    assert rt.ready.is_set()
    assert ledger.get("tenant/fine") is not None
    assert events.events == [("Pod", "mallory", "poison", UntrustedObjects.REASON)]
    later = make_pod("later", ns="tenant", cpu="1", node="a", phase="Running", scheduler="x")
    cache.pods.emit(MODIFIED, poison)  # the watch: reported, and the next event still lands
    cache.pods.emit(ADDED, later)
    assert ledger.get("tenant/later") is not None
    assert graph.node_usage()["a"]["core"]["allocated"] == 2000


def test_a_node_that_cannot_be_built_is_skipped_and_the_others_are_kept() -> None:
    class OneBadNode(ClusterGraph):
        def upsert_node(self, node: Node) -> list[int]:
            if node.name == "bad":
                raise ValueError("cannot model it")
            return super().upsert_node(node)

        def reset_nodes(self, nodes: Any) -> list[int]:
            nodes = list(nodes)
            if any(n.name == "bad" for n in nodes):
                raise ValueError("cannot model it")
            return super().reset_nodes(nodes)

    graph = OneBadNode(EXAMPLES)
    events = Recorded()
    cache = FakeCache([make_node("bad"), make_node("good")], [])
    rt = ClusterWatch(cache, graph, Ledger(graph), UntrustedObjects(events))  # type: ignore[arg-type]
    rt.rebuild()
    assert rt.ready.is_set() and graph.node_names() == ["good"]
    assert events.events == [("Node", "", "bad", UntrustedObjects.REASON)]


# ---- a tenant cannot free its exclusive backend for someone else --------------------------


def _running_quantum_pod(seal: RecordSeal) -> tuple[Ledger, ClusterGraph, Pod, str]:
    graph = ClusterGraph(EXAMPLES, [make_node("a", cpu="4")])
    ledger = Ledger(graph, seal=seal)
    pod = make_pod("q", ns="alice", cpu="1", extra=QPU)
    placed = ledger.place("alice/q", [pod])
    assert placed.status == "allocated"
    h = ledger.commit(pod.key, pod.metadata.uid, "a")
    assert h.backend is not None
    return ledger, graph, bound(pod, "a", ledger.annotations(h)), h.backend.name


def _restarted(seal: RecordSeal, pods: list[Pod]) -> tuple[Ledger, ClusterGraph]:
    graph = ClusterGraph(EXAMPLES, [make_node("a", cpu="4")])
    ledger = Ledger(graph, seal=seal)
    rt = ClusterWatch(FakeCache([make_node("a", cpu="4")], pods), graph, ledger)  # type: ignore[arg-type]
    rt.rebuild()
    return ledger, graph


def _edited(pod: Pod) -> Pod:
    doc = json.loads(json.dumps({"metadata": {"annotations": pod.metadata.annotations}}))
    notes = doc["metadata"]["annotations"]
    notes[names.ANNOTATION_ALLOCATION] = notes[names.ANNOTATION_ALLOCATION].replace(
        '"group":"alice/q"', '"group":"alice/other"'
    )
    return bound(pod, "a", notes)


def _resized(pod: Pod) -> Pod:
    """The same pod after an in-place resize: its requests no longer match its record."""
    bigger = make_pod("q", ns="alice", cpu="2", extra=QPU)
    return bound(bigger, "a", dict(pod.metadata.annotations))


@pytest.mark.parametrize("change", [_edited, _resized])
def test_an_untrusted_pod_keeps_the_backend_it_runs_with_across_a_restart(change: Any) -> None:
    seal = RecordSeal(b"s" * 32)
    _, _, running, backend = _running_quantum_pod(seal)
    changed = change(running)
    ledger, graph = _restarted(seal, [changed])
    held = ledger.get("alice/q")
    assert held is not None and held.state == FOREIGN
    assert graph.backend_usage()[backend]
    # Another tenant's quantum pod gets the other backend, never the one in use.
    other = ledger.place("bob/p", [make_pod("p", ns="bob", cpu="1", extra=QPU)])
    assert other.status == "allocated"
    assert other.holdings["bob/p"].backend is not None
    assert other.holdings["bob/p"].backend.name != backend
    # A third waits: both backends are in use.
    third = ledger.place("carol/r", [make_pod("r", ns="carol", cpu="1", extra=QPU)])
    assert third.status == "busy"
    ledger.release("alice/q", "pod Succeeded")
    assert ledger.place("carol/r", [make_pod("r", ns="carol", cpu="1", extra=QPU)]).status == (
        "allocated"
    )


def test_an_edited_record_on_a_running_pod_changes_nothing_it_holds() -> None:
    seal = RecordSeal(b"s" * 32)
    ledger, graph, running, backend = _running_quantum_pod(seal)
    before = (graph.node_usage(), graph.backend_usage())
    ledger.observe(_edited(running))
    assert ledger.get("alice/q").state == COMMITTED  # type: ignore[union-attr]
    assert (graph.node_usage(), graph.backend_usage()) == before


# ---- the property: random hostile objects ------------------------------------------------

_text = st.text(max_size=12)
_quantity = st.one_of(
    st.sampled_from(["1", "500m", "1e18", "-5", "1e400", "abc", "", "0x10", "1Ei", "0.0000001"]),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.none(),
    st.lists(st.integers(), max_size=2),
)
_resource = st.sampled_from(
    ["cpu", "memory", "nvidia.com/gpu", names.resource_name("qpu"), names.resource_name("nope")]
)
_annotation_key = st.sampled_from(
    [
        names.ANNOTATION_ALLOCATION,
        names.ANNOTATION_ALLOCATION_SEAL,
        names.ANNOTATION_BACKEND,
        names.ANNOTATION_GROUP_SIZE,
        names.ANNOTATION_TOPOLOGY,
        names.ANNOTATION_RUNTIME,
        names.ANNOTATION_ENV_CONTAINERS,
        names.attr_annotation("vendor"),
    ]
)
_annotation_value = st.one_of(
    _text, st.sampled_from(['{"group":"tenant/g","node":"a","amounts":{"core":4000}}', "{}"])
).filter(lambda v: v not in ("ibm_fez", "ibm_marrakesh"))
_group_label = st.sampled_from(
    [names.LABEL_GROUP, names.LABEL_K8S_POD_GROUP, names.LABEL_X_K8S_POD_GROUP]
)
_phase = st.sampled_from(["Running", "Pending", "Succeeded", "Failed", "Unknown", "", "Weird"])


@st.composite
def hostile_pod(draw: st.DrawFn, i: int) -> bytes:
    """A pod of tenant "mallory", whose fields and annotations are anything it can write."""
    phase = draw(_phase)
    terminal = phase in ("Succeeded", "Failed")
    # Running pods sit on mallory's own node (or none the graph has); ended ones anywhere.
    node = draw(st.sampled_from(["a", "b", "c", "zzz", ""] if terminal else ["c", "zzz", ""]))
    requests = draw(st.dictionaries(_resource, _quantity, max_size=4))
    doc: dict[str, Any] = {
        "metadata": {
            "name": draw(st.sampled_from(["w0", "w1", "g", "q", f"m{i}"])),
            "namespace": "mallory",
            "uid": draw(st.sampled_from([f"u{i}", "", "uid-tenant-w0"])),
            "labels": draw(st.dictionaries(_group_label, st.sampled_from(["g", "q", ""]))),
            "annotations": draw(st.dictionaries(_annotation_key, _annotation_value, max_size=4)),
        },
        "spec": {
            "schedulerName": draw(st.sampled_from(["fluence", "default-scheduler", ""])),
            "nodeName": node,
            "priority": draw(st.one_of(st.none(), st.integers(-(2**31), 2**31 - 1))),
            "containers": [{"name": "c", "resources": {"requests": requests}}],
        },
        "status": {"phase": phase},
    }
    if draw(st.booleans()):
        doc["spec"]["schedulingGroup"] = {"podGroupName": draw(st.sampled_from(["g", "q", ""]))}
    if draw(st.booleans()):
        # A field of the wrong type: the whole object is undecodable.
        section, field = draw(st.sampled_from([("metadata", "labels"), ("spec", "containers")]))
        doc[section][field] = draw(st.sampled_from([7, "x", [1], None, True]))
    return json.dumps(doc).encode()


@st.composite
def hostile_node(draw: st.DrawFn, i: int) -> bytes:
    alloc = draw(st.dictionaries(st.sampled_from(["cpu", "memory", "pods"]), _quantity))
    doc = {
        "metadata": {"name": f"h{i}", "labels": {"kubernetes.io/hostname": f"h{i}"}},
        "status": {"capacity": alloc, "allocatable": alloc},
    }
    return json.dumps(doc).encode()


def _decoded(reflector: Reflector[Any], raws: list[bytes]) -> list[Any]:
    """What the reflector keeps of a list: every object it can decode."""
    return [o for o in (reflector._decode(r) for r in raws) if o is not None]


def _benign_placement(ledger: Ledger, exclude: list[str]) -> dict[str, tuple[str, str]]:
    gang = [make_pod(f"w{i}", ns="tenant", cpu="1", group="g") for i in range(2)]
    quantum = make_pod("q", ns="tenant", cpu="500m", extra=QPU)
    out: dict[str, tuple[str, str]] = {}
    for key, pods in (("tenant/g", gang), ("tenant/q", [quantum])):
        res = ledger.place(key, pods, exclude)
        out[key] = (res.status, "")
        for k, h in res.holdings.items():
            out[k] = (h.node, h.backend.name if h.backend else "")
    return out


NODES = [make_node("a", cpu="4"), make_node("b", cpu="4"), make_node("c", cpu="4")]


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.integers(0, 12).flatmap(lambda n: st.tuples(*(hostile_pod(i) for i in range(n)))),
    st.integers(0, 3).flatmap(lambda n: st.tuples(*(hostile_node(i) for i in range(n)))),
)
def test_hostile_objects_never_stop_the_rebuild_nor_move_other_tenants(
    pods: tuple[bytes, ...], nodes: tuple[bytes, ...]
) -> None:
    pod_reflector: Reflector[Pod] = Reflector(None, "", decode_pod, lambda p: p.key, kind="Pod")  # type: ignore[arg-type]
    node_reflector: Reflector[Node] = Reflector(
        None, "", decode_node, lambda n: n.name, kind="Node"
    )  # type: ignore[arg-type]
    listed_nodes = [*NODES, *_decoded(node_reflector, list(nodes))]
    graph = ClusterGraph(EXAMPLES)
    ledger = Ledger(graph)
    rt = ClusterWatch(FakeCache(listed_nodes, _decoded(pod_reflector, list(pods))), graph, ledger)  # type: ignore[arg-type]
    rt.rebuild()  # never raises, whatever the objects say
    assert rt.ready.is_set()
    event("some pods undecodable" if len(rt.cache.pods.items()) < len(pods) else "all decoded")
    for h in ledger.holdings().values():
        event(f"a hostile pod held as {h.state}")
    if ledger.recovery.unaccounted():
        event("a hostile pod left unaccounted")
    assert {"a", "b"} <= set(graph.node_names())
    # The benign tenant's pods land exactly where they land in a cluster without mallory.
    clean = Ledger(ClusterGraph(EXAMPLES, NODES))
    others = [n for n in graph.node_names() if n not in ("a", "b")]
    assert _benign_placement(ledger, others) == _benign_placement(clean, ["c"])
    # And the watch takes the same objects again without failing.
    for pod in _decoded(pod_reflector, list(pods)):
        rt._on_pod(MODIFIED, pod)
    assert ledger.get("tenant/w0") is not None


def test_an_undecodable_object_is_counted_by_kind(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[str, str]] = []
    monkeypatch.setattr(untrusted, "count", lambda kind, reason: seen.append((kind, reason)))
    reflector: Reflector[Pod] = Reflector(None, "", decode_pod, lambda p: p.key, kind="Pod")  # type: ignore[arg-type]
    assert reflector._decode(b'{"metadata": {"name": "x", "labels": 7}}') is None
    assert seen == [("Pod", untrusted.UNDECODABLE)]
