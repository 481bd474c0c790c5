"""Only records this scheduler sealed for a pod are replayed; forgeries change no placement."""

from __future__ import annotations

from types import SimpleNamespace

import hypothesis.strategies as st
from hypothesis import HealthCheck, given, settings

from fluence import names, resources
from fluence.cluster_graph import ClusterGraph
from fluence.ledger import Ledger
from fluence.pods import Pod
from fluence.scheduling.holdings import COMMITTED, FOREIGN
from fluence.scheduling.record import AllocationRecord, DeviceRecord, RecordSeal, encode_record
from fluence.startup_rebuild import recover_from_cluster
from tests.unit.fluence.test_ledger import bound
from tests.unit.fluence.test_pods import make_node, make_pod

EXAMPLES = resources.load("examples/resources.yaml")
KEY = RecordSeal(b"k" * 32)
NODES = [make_node("a", cpu="4"), make_node("b", cpu="4")]


def Reflectors(pods: list[Pod]) -> SimpleNamespace:  # noqa: N802 - stands in for a class
    """The reflectors' two lists, as recovery reads them."""
    return SimpleNamespace(
        nodes=SimpleNamespace(items=lambda: list(NODES)),
        pods=SimpleNamespace(items=lambda: list(pods)),
    )


def fresh() -> tuple[ClusterGraph, Ledger]:
    graph = ClusterGraph(EXAMPLES, NODES)
    return graph, Ledger(graph, seal=KEY)


def test_seal_binds_the_record_to_its_pod_and_uid() -> None:
    sig = KEY.sign("ns/p", "u1", "{}")
    assert KEY.verify("ns/p", "u1", "{}", sig)
    assert not KEY.verify("ns/q", "u1", "{}", sig)
    assert not KEY.verify("ns/p", "u2", "{}", sig)
    assert not KEY.verify("ns/p", "u1", "{ }", sig)
    assert not RecordSeal(b"x" * 32).verify("ns/p", "u1", "{}", sig)
    assert not KEY.verify("ns/p", "", "{}", KEY.sign("ns/p", "", "{}"))


def test_a_sealed_record_survives_a_restart_with_the_same_key() -> None:
    g1, l1 = fresh()
    gang = [
        make_pod(f"w{i}", cpu="1", group="g", extra={names.resource_name("qpu"): "1"})
        for i in range(2)
    ]
    l1.place("default/g", gang)
    cluster = []
    for p in gang:
        h = l1.commit(p.key, p.metadata.uid, l1.holdings()[p.key].node)
        cluster.append(bound(p, h.node, l1.annotations(h)))
    g2, l2 = fresh()
    for p in cluster:
        l2.observe(p)
    assert {h.state for h in l2.holdings().values()} == {COMMITTED}
    assert g2.backend_usage() == g1.backend_usage()
    # Another key (another cluster's, or a made-up one) proves nothing: the pods are
    # accounted by their requests, and the backend their containers read stays theirs.
    g3 = ClusterGraph(EXAMPLES, NODES)
    l3 = Ledger(g3, seal=RecordSeal(b"z" * 32))
    for p in cluster:
        l3.observe(p)
    assert {h.state for h in l3.holdings().values()} == {FOREIGN}
    assert any(g1.backend_usage().values()) and g3.backend_usage() == g1.backend_usage()


def test_a_sealed_record_copied_onto_another_pod_is_ignored() -> None:
    g1, l1 = fresh()
    victim = make_pod("v", cpu="1", extra={names.resource_name("qpu"): "1"})
    l1.place("default/v", [victim])
    h = l1.commit(victim.key, victim.metadata.uid, l1.holdings()[victim.key].node)
    stolen = l1.annotations(h)
    thief = bound(make_pod("t", cpu="1", extra={names.resource_name("qpu"): "1"}), h.node, stolen)
    owner = bound(victim, h.node, stolen)
    g2, l2 = fresh()
    # Whatever order the list brings them in, the victim's sealed record is replayed.
    recover_from_cluster(Reflectors([thief, owner]), g2, l2)  # type: ignore[arg-type]
    assert l2.get("default/t") is not None and l2.get("default/t").state == FOREIGN  # type: ignore[union-attr]
    assert not l2.get("default/t").devices  # type: ignore[union-attr]
    assert l2.get("default/v").state == COMMITTED and l2.get("default/v").devices  # type: ignore[union-attr]
    # The thief's container reads the same backend: it is not handed to a third pod
    # while the thief runs, even after the victim ended.
    l2.release("default/v", "pod Succeeded")
    assert g2.backend_usage() == g1.backend_usage()
    other = l2.place("default/x", [make_pod("x", cpu="1", extra={names.resource_name("qpu"): "1"})])
    assert other.holdings["default/x"].backend.name != h.backend.name  # type: ignore[union-attr]
    l2.release("default/t", "pod Succeeded")
    assert sum(g2.backend_usage().values()) == 1  # only x's


backend_paths = st.sampled_from(
    ["/cluster0/ibm_fez", "/cluster0/ibm_marrakesh", "/cluster0/a/core0", "/nowhere", ""]
)
records = st.builds(
    AllocationRecord,
    group=st.text(max_size=8),
    node=st.sampled_from(["a", "b", "", "c"]),
    amounts=st.dictionaries(
        st.sampled_from(["core", "memory", "gpu", "qpu", "x"]),
        st.integers(min_value=-(2**63), max_value=2**63 - 1),
        max_size=3,
    ),
    jobid=st.integers(min_value=-(2**63), max_value=2**63 - 1),
    backend=st.sampled_from(["", "ibm_fez", "ibm_marrakesh", "nope"]),
    devices=st.lists(
        st.builds(
            DeviceRecord,
            type=st.sampled_from(["qpu", "qdevice", "qubit", "core"]),
            path=backend_paths,
            name=st.text(max_size=6),
            jobid=st.integers(min_value=-(2**63), max_value=2**63 - 1),
        ),
        max_size=3,
    ),
)
forgeries = st.lists(
    st.tuples(
        records,
        st.sampled_from(["none", "garbage", "other-key", "other-pod"]),
        st.sampled_from(["", "100m", "1"]),
        st.booleans(),
    ),
    min_size=1,
    max_size=6,
)


def forged_pod(i: int, rec: AllocationRecord, how: str, cpu: str, asks_qpu: bool) -> Pod:
    text = encode_record(rec)
    name = f"f{i}"
    seal = {
        "none": "",
        "garbage": "00" * 32,
        "other-key": RecordSeal(b"q" * 32).sign(f"default/{name}", f"uid-default-{name}", text),
        "other-pod": KEY.sign("default/victim", "uid-default-victim", text),
    }[how]
    extra = {names.resource_name("qpu"): "1"} if asks_qpu else None
    pod = make_pod(name, cpu=cpu, extra=extra)
    notes = {names.ANNOTATION_ALLOCATION: text}
    if seal:
        notes[names.ANNOTATION_ALLOCATION_SEAL] = seal
    return bound(pod, rec.node if rec.node in ("a", "b") else "a", notes)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(forgeries)
def test_forged_records_change_no_placement(
    forged: list[tuple[AllocationRecord, str, str, bool]],
) -> None:
    """Pods carrying forged records are accounted exactly as the same pods without records."""
    pods = [forged_pod(i, *f) for i, f in enumerate(forged)]
    g_forged, l_forged = fresh()
    g_plain, l_plain = fresh()
    for p in pods:
        l_forged.observe(p)  # never raises, whatever the record says
    for p in pods:
        stripped = bound(p, p.spec.node_name)
        stripped.metadata.annotations.pop(names.ANNOTATION_ALLOCATION, None)
        stripped.metadata.annotations.pop(names.ANNOTATION_ALLOCATION_SEAL, None)
        l_plain.observe(stripped)
    assert g_forged.node_usage() == g_plain.node_usage()
    assert g_forged.backend_usage() == g_plain.backend_usage()
    assert all(h.state == FOREIGN and not h.devices for h in l_forged.holdings().values())
    # Another tenant's gang is placed exactly as it would be without the forgeries.
    gang = [
        make_pod(f"g{i}", cpu="500m", group="gang", extra={names.resource_name("qpu"): "1"})
        for i in range(2)
    ]
    r_forged = l_forged.place("default/gang", gang)
    r_plain = l_plain.place("default/gang", gang)
    assert r_forged.status == r_plain.status
    assert {k: (h.node, h.backend) for k, h in r_forged.holdings.items()} == {
        k: (h.node, h.backend) for k, h in r_plain.holdings.items()
    }
