"""The ledger: tentative at filter, committed at bind, released at the end, rebuilt on restart."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import hypothesis.strategies as st
from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from fluence import names, resources
from fluence.cluster_graph import ClusterGraph
from fluence.ledger import Ledger
from fluence.pods import Pod, decode_pod
from fluence.scheduling.backfill import NONE
from fluence.scheduling.holdings import COMMITTED, FOREIGN, TENTATIVE
from fluence.scheduling.record import decode_record
from fluence.scheduling.request import LedgerError
from fluence.startup_rebuild import recover_from_cluster
from tests.unit.fluence.test_pods import make_node, make_pod

EXAMPLES = resources.load("examples/resources.yaml")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def bound(
    pod: Pod, node: str, annotations: dict[str, str] | None = None, phase: str = "Running"
) -> Pod:
    doc: dict[str, Any] = json.loads(
        json.dumps(
            {
                "metadata": {
                    "name": pod.metadata.name,
                    "namespace": pod.metadata.namespace,
                    "uid": pod.metadata.uid,
                    "labels": pod.metadata.labels,
                    "annotations": {**pod.metadata.annotations, **(annotations or {})},
                },
                "spec": {
                    "schedulerName": pod.spec.scheduler_name,
                    "nodeName": node,
                    "containers": [
                        {"name": c.name, "resources": {"requests": c.resources.requests}}
                        for c in pod.spec.containers
                    ],
                },
                "status": {"phase": phase},
            }
        )
    )
    return decode_pod(json.dumps(doc))


def test_four_one_cpu_pods_of_a_gang_share_one_four_cpu_node_and_a_fifth_does_not_fit() -> None:
    ledger = Ledger(ClusterGraph(EXAMPLES, [make_node("big", cpu="4", memory="8Gi")]))
    gang = [make_pod(f"w{i}", cpu="1", memory="1Gi", group="g") for i in range(4)]
    res = ledger.place("default/g", gang)
    assert res.status == "allocated"
    assert {k: h.node for k, h in res.holdings.items()} == {
        f"default/w{i}": "big" for i in range(4)
    }
    assert len({h.jobid for h in res.holdings.values()}) == 4
    fifth = ledger.place("default/x", [make_pod("x", cpu="1", memory="1Gi")])
    assert fifth.status == "busy"
    assert "does not fit now" in fifth.message


def test_first_policy_fills_the_first_node_before_the_next() -> None:
    ledger = Ledger(ClusterGraph(EXAMPLES, [make_node("a", cpu="4"), make_node("b", cpu="4")]))
    res = ledger.place("default/g", [make_pod(f"w{i}", cpu="1", group="g") for i in range(4)])
    assert len({h.node for h in res.holdings.values()}) == 1


def test_gang_larger_than_the_cluster_is_unsatisfiable_and_holds_nothing() -> None:
    g = ClusterGraph(EXAMPLES, [make_node("a", cpu="2")])
    ledger = Ledger(g)
    res = ledger.place("default/g", [make_pod(f"w{i}", cpu="1", group="g") for i in range(3)])
    assert res.status == "unsatisfiable" and "can never fit" in res.message
    assert ledger.holdings() == {}
    assert g.node_usage()["a"]["core"]["allocated"] == 0


def test_heterogeneous_gang_is_all_or_nothing() -> None:
    g = ClusterGraph(EXAMPLES, [make_node("a", cpu="4", gpu="1"), make_node("b", cpu="4")])
    ledger = Ledger(g)
    pods = [
        make_pod("gpu0", cpu="1", extra={"nvidia.com/gpu": "1"}),
        make_pod("cpu0", cpu="4"),
        make_pod("cpu1", cpu="3"),
    ]
    res = ledger.place("default/h", pods)
    assert res.status == "allocated"
    assert res.holdings["default/gpu0"].node == "a"
    assert res.holdings["default/gpu0"].amounts == {"core": 1000, "gpu": 1}
    # A second gang whose GPU part cannot fit leaves nothing behind.
    before = g.node_usage()
    again = ledger.place(
        "default/h2",
        [make_pod("g2", cpu="1", extra={"nvidia.com/gpu": "1"}), make_pod("c2", cpu="1")],
    )
    assert again.status == "busy"
    assert g.node_usage() == before


def test_commit_release_and_move() -> None:
    g = ClusterGraph(EXAMPLES, [make_node("a", cpu="2"), make_node("b", cpu="2")])
    ledger = Ledger(g)
    res = ledger.place("default/p", [make_pod("p", cpu="2")])
    first = res.holdings["default/p"].node
    other = "b" if first == "a" else "a"
    moved = ledger.commit("default/p", "uid-default-p", other)
    assert (moved.node, moved.state) == (other, COMMITTED)
    assert g.node_usage()[other]["core"]["allocated"] == 2000
    assert g.node_usage()[first]["core"]["allocated"] == 0
    rec = decode_record(ledger.annotations(moved)[names.ANNOTATION_ALLOCATION])
    assert (rec.node, rec.amounts, rec.group) == (other, {"core": 2000}, "default/p")
    ledger.release("default/p", "test")
    assert g.node_usage()[other]["core"]["allocated"] == 0


def test_commit_refuses_a_node_where_the_pod_does_not_fit() -> None:
    g = ClusterGraph(EXAMPLES, [make_node("a", cpu="2"), make_node("b", cpu="1")])
    ledger = Ledger(g)
    ledger.place("default/p", [make_pod("p", cpu="2")])
    try:
        ledger.commit("default/p", "", "b")
    except LedgerError as exc:
        assert "do not fit" in str(exc)
    else:
        raise AssertionError("commit to a too-small node must fail")
    try:
        ledger.commit("default/unknown", "", "a")
    except LedgerError as exc:
        assert "no allocation" in str(exc)
    else:
        raise AssertionError("commit without allocation must fail")


def test_unbound_tentative_holdings_expire_and_touch_keeps_them() -> None:
    clock = Clock()
    ledger = Ledger(ClusterGraph(EXAMPLES, [make_node("a")]), unbound_timeout=300, clock=clock)
    ledger.place("default/g", [make_pod("p", cpu="1"), make_pod("q", cpu="1")])
    ledger.commit("default/q", "", ledger.holdings()["default/q"].node)
    clock.now += 200
    ledger.touch("default/p")
    clock.now += 200
    assert ledger.expire() == []
    clock.now += 100
    assert ledger.expire() == ["default/p"]
    assert list(ledger.holdings()) == ["default/q"]


def test_terminal_and_deleted_pods_release_at_once() -> None:
    g = ClusterGraph(EXAMPLES, [make_node("a")])
    ledger = Ledger(g)
    p, q = make_pod("p", cpu="1"), make_pod("q", cpu="1")
    ledger.place("default/g", [p, q])
    for k in ("default/p", "default/q"):
        h = ledger.commit(k, "", "a")
    ledger.observe(bound(p, "a", ledger.annotations(h), phase="Succeeded"))
    ledger.forget("default/q")
    assert ledger.holdings() == {}
    assert g.node_usage()["a"]["core"]["allocated"] == 0


def test_recovery_replays_records_and_accounts_foreign_pods() -> None:
    nodes = [make_node("a", cpu="4"), make_node("b", cpu="4")]
    g1 = ClusterGraph(EXAMPLES, nodes)
    l1 = Ledger(g1)
    gang = [
        make_pod(
            f"w{i}", cpu="1", group="g", extra={names.resource_name("qpu"): "1"} if i == 0 else None
        )
        for i in range(3)
    ]
    l1.place("default/g", gang)
    cluster: list[Pod] = []
    for p in gang:
        h = l1.commit(p.key, p.metadata.uid, l1.holdings()[p.key].node)
        cluster.append(bound(p, h.node, l1.annotations(h)))
    cluster.append(bound(make_pod("sys", cpu="500m", scheduler="default-scheduler"), "b"))
    cluster.append(bound(make_pod("done", cpu="4"), "b", phase="Succeeded"))
    # A new process: fresh graph, same nodes, same pods.
    g2 = ClusterGraph(EXAMPLES, nodes)
    l2 = Ledger(g2)
    for p in cluster:
        l2.observe(p)
    assert g2.node_usage() == {n: u for n, u in g1.node_usage().items()} | {
        "b": g2.node_usage()["b"]
    }
    assert (
        g2.node_usage()["b"]["core"]["allocated"] == g1.node_usage()["b"]["core"]["allocated"] + 500
    )
    assert g2.backend_usage() == g1.backend_usage()
    assert {k: h.state for k, h in l2.holdings().items()} == {
        "default/w0": COMMITTED,
        "default/w1": COMMITTED,
        "default/w2": COMMITTED,
        "default/sys": FOREIGN,
    }
    w0 = l2.get("default/w0")
    assert w0 is not None and w0.backend is not None and w0.devices
    # Job ids are the process's own: a new placement never shares one with a replayed holding.
    res = l2.place("default/n", [make_pod("n", cpu="1")])
    compute = [h.jobid for h in l2.holdings().values() if h.jobid]
    devices = {d.jobid for h in l2.holdings().values() for d in h.devices}
    live = compute + sorted(devices)
    assert len(live) == len(set(live)) and res.holdings["default/n"].jobid in live
    assert all(g2.holds(j) for j in live)
    # Observing the same pods again (a standby following the watch) changes nothing.
    usage = g2.node_usage()
    for p in cluster:
        l2.observe(p)
    assert g2.node_usage() == usage


def test_watch_confirms_our_own_bind_without_double_booking() -> None:
    g = ClusterGraph(EXAMPLES, [make_node("a", cpu="2")])
    ledger = Ledger(g)
    p = make_pod("p", cpu="1")
    ledger.place("default/p", [p])
    h = ledger.commit("default/p", "", "a")
    ledger.observe(bound(p, "a", ledger.annotations(h)))
    assert g.node_usage()["a"]["core"]["allocated"] == 1000
    assert ledger.get("default/p") is h


class LedgerMachine(RuleBasedStateMachine):
    """Random place/commit/release/expire/observe sequences never over-commit a node or backend."""

    def __init__(self) -> None:
        super().__init__()
        self.clock = Clock()
        self.graph = ClusterGraph(
            EXAMPLES, [make_node("a", cpu="3", memory="4Gi"), make_node("b", cpu="2", memory="2Gi")]
        )
        # No reservations: the graph then holds exactly what the holdings do (waiting groups
        # and their reservations have their own properties in test_reservations.py).
        self.ledger = Ledger(self.graph, unbound_timeout=50, clock=self.clock, backfill=NONE)
        self.n = 0

    @rule(size=st.integers(1, 4), cpu=st.sampled_from(["500m", "1", "2"]), qpu=st.booleans())
    def place(self, size: int, cpu: str, qpu: bool) -> None:
        self.n += 1
        pods = [
            make_pod(
                f"g{self.n}-{i}",
                cpu=cpu,
                memory="512Mi",
                extra={names.resource_name("qpu"): "1"} if qpu and i == 0 else None,
            )
            for i in range(size)
        ]
        self.ledger.place(f"default/g{self.n}", pods)

    @rule(data=st.data())
    def commit(self, data: st.DataObject) -> None:
        keys = sorted(self.ledger.holdings())
        if keys:
            k = data.draw(st.sampled_from(keys))
            node = data.draw(st.sampled_from(["a", "b"]))
            with contextlib.suppress(LedgerError):
                self.ledger.commit(k, "", node)

    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        keys = sorted(self.ledger.holdings())
        if keys:
            self.ledger.release(data.draw(st.sampled_from(keys)), "test")

    @rule(dt=st.integers(0, 60))
    def tick(self, dt: int) -> None:
        self.clock.now += dt
        self.ledger.expire()

    @invariant()
    def never_over_committed(self) -> None:
        held: dict[str, dict[str, int]] = {}
        device_holds: dict[int, str] = {}  # members of a gang share their group's holds
        for h in self.ledger.holdings().values():
            for t, n in h.amounts.items():
                held.setdefault(h.node, {}).setdefault(t, 0)
                held[h.node][t] += n
            device_holds.update((d.jobid, d.path) for d in h.devices)
        backends = list(device_holds.values())
        usage = self.graph.node_usage()
        for node, per in usage.items():
            for t, u in per.items():
                assert u["allocated"] <= u["capacity"]
                assert u["allocated"] == held.get(node, {}).get(t, 0)
        assert len(backends) == len(set(backends))
        assert sum(self.graph.backend_usage().values()) == len(backends)
        assert all(h.state in (TENTATIVE, COMMITTED) for h in self.ledger.holdings().values())

    @invariant()
    def each_groups_holdings_are_at_hand(self) -> None:
        holdings = self.ledger._holdings
        groups = {h.group for h in holdings.values()}
        for g in groups | {"default/none"}:
            by_scan = [h.pod for h in holdings.values() if h.group == g]
            assert sorted(h.pod for h in holdings.of_group(g)) == sorted(by_scan)


TestLedgerMachine = LedgerMachine.TestCase
TestLedgerMachine.settings = settings(max_examples=40, stateful_step_count=25, deadline=None)


def test_last_match_of_each_group_is_remembered_for_explain() -> None:
    ledger = Ledger(ClusterGraph(EXAMPLES, [make_node("big", cpu="2", memory="8Gi")]))
    assert ledger.last_match("default/g") is None
    ledger.place("default/g", [make_pod(f"w{i}", cpu="1", group="g") for i in range(2)])
    ok = ledger.last_match("default/g")
    assert ok is not None and (ok.status, ok.pods) == ("allocated", 2)
    ledger.place("default/h", [make_pod("h0", cpu="1", group="h")])
    busy = ledger.last_match("default/h")
    assert busy is not None and busy.status == "busy" and "does not fit now" in busy.message
    assert busy.match_seconds >= 0


def test_a_gangs_backend_is_held_until_its_last_member_lets_go() -> None:
    g = ClusterGraph(EXAMPLES, [make_node("a", cpu="4"), make_node("b", cpu="4")])
    ledger = Ledger(g)
    qpu = {names.resource_name("qpu"): "1"}
    gang = [make_pod(f"w{i}", cpu="1", group="g", extra=qpu if i == 0 else None) for i in range(3)]
    assert ledger.place("default/g", gang).status == "allocated"
    held = {b for b, used in g.backend_usage().items() if used}
    assert len(held) == 1
    # The member that asked for the backend ends first; the others still use it.
    ledger.release("default/w0", "pod Succeeded")
    assert {b for b, used in g.backend_usage().items() if used} == held
    other = make_pod("x", cpu="1", extra=qpu)
    placed = ledger.place("default/x", [other])
    assert placed.holdings["default/x"].backend is not None
    assert placed.holdings["default/x"].backend.name not in held
    ledger.release("default/w1", "pod Succeeded")
    ledger.release("default/w2", "pod Succeeded")
    assert sum(g.backend_usage().values()) == 1  # only x's


def test_a_gangs_backend_is_restored_from_any_member_after_a_restart() -> None:
    nodes = [make_node("a", cpu="4")]
    g1 = ClusterGraph(EXAMPLES, nodes)
    l1 = Ledger(g1)
    qpu = {names.resource_name("qpu"): "1"}
    gang = [make_pod(f"w{i}", cpu="1", group="g", extra=qpu if i == 0 else None) for i in range(2)]
    l1.place("default/g", gang)
    cluster = []
    for p in gang:
        h = l1.commit(p.key, p.metadata.uid, "a")
        cluster.append(bound(p, "a", l1.annotations(h)))
    # The owner has ended before the restart; only w1 still runs.
    g2 = ClusterGraph(EXAMPLES, nodes)
    l2 = Ledger(g2)
    l2.observe(bound(gang[0], "a", cluster[0].metadata.annotations, phase="Succeeded"))
    l2.observe(cluster[1])
    assert g2.backend_usage() == g1.backend_usage()
    w1 = l2.get("default/w1")
    assert w1 is not None and w1.backend is not None and w1.devices
    # Both members running: the backend is held once, shared.
    g3 = ClusterGraph(EXAMPLES, nodes)
    l3 = Ledger(g3)
    for p in cluster:
        l3.observe(p)
    assert g3.backend_usage() == g1.backend_usage()
    l3.release("default/w0", "pod Succeeded")
    assert g3.backend_usage() == g1.backend_usage()
    l3.release("default/w1", "pod Succeeded")
    assert not any(g3.backend_usage().values())


def test_a_foreign_pod_that_did_not_fit_is_accounted_once_fluence_releases_capacity() -> None:
    """Pods of other schedulers are retried when capacity frees, not only on node events."""
    g = ClusterGraph(EXAMPLES, [make_node("a", cpu="2")])
    ledger = Ledger(g)
    ours = make_pod("ours", cpu="2")
    ledger.place("default/ours", [ours])
    ledger.commit("default/ours", ours.metadata.uid, "a")
    # Another scheduler ran a pod onto the node meanwhile (the API server accepts that).
    theirs = bound(make_pod("theirs", cpu="1", scheduler="default-scheduler"), "a")
    ledger.observe(theirs)
    assert ledger.recovery.unaccounted() == ["default/theirs"]
    ledger.release("default/ours", "pod Succeeded")
    assert ledger.recovery.unaccounted() == []
    assert ledger.get("default/theirs") is not None
    assert g.node_usage()["a"]["core"]["allocated"] == 1000


def test_a_gang_that_cannot_fully_bind_releases_everything_after_its_timeout() -> None:
    clock = Clock()
    g = ClusterGraph(EXAMPLES, [make_node("a", cpu="4")])
    ledger = Ledger(g, unbound_timeout=60, gang_timeout=120, clock=clock)
    gang = [make_pod(f"w{i}", cpu="1", group="g") for i in range(3)]
    ledger.place("default/g", gang)
    ledger.commit("default/w0", gang[0].metadata.uid, "a")  # one member binds
    for _ in range(4):  # the others are retried by the scheduler, renewing their holdings
        clock.now += 40
        for k in ("default/w1", "default/w2"):
            ledger.touch(k)
        released = ledger.expire()
        if released:
            break
    assert sorted(released) == ["default/w1", "default/w2"]
    assert clock.now - 1000.0 >= 120
    assert ledger.get("default/w0") is not None  # bound and running: kept
    assert g.node_usage()["a"]["core"]["allocated"] == 1000


def test_a_restart_between_a_gangs_binds_holds_the_unbound_members_again() -> None:
    """Capacity of members not bound yet is not lost to other pods across a restart."""
    nodes = [make_node("a", cpu="2"), make_node("b", cpu="2")]
    g1 = ClusterGraph(EXAMPLES, nodes)
    l1 = Ledger(g1)
    qpu = {names.resource_name("qpu"): "1"}
    gang = [make_pod(f"w{i}", cpu="2", group="g", extra=qpu if i == 0 else None) for i in range(2)]
    assert l1.place("default/g", gang).status == "allocated"
    node_of = {k: h.node for k, h in l1.holdings().items()}
    h0 = l1.commit("default/w0", gang[0].metadata.uid, node_of["default/w0"])
    first = bound(gang[0], h0.node, l1.annotations(h0))
    # The extender dies here: w0 is bound, w1 is not.
    g2 = ClusterGraph(EXAMPLES, nodes)
    l2 = Ledger(g2)
    l2.observe(first)
    l2.observe(gang[1])  # pending, not bound
    w1 = l2.get("default/w1")
    assert w1 is not None and w1.state == TENTATIVE and w1.node == node_of["default/w1"]
    assert w1.devices and w1.devices is l2.get("default/w0").devices  # type: ignore[union-attr]
    assert g2.node_usage() == g1.node_usage() and g2.backend_usage() == g1.backend_usage()
    # A stranger finds no room; the gang's member binds where it was held.
    assert l2.place("default/x", [make_pod("x", cpu="1")]).status != "allocated"
    assert l2.commit("default/w1", gang[1].metadata.uid, w1.node) is w1

    # A pending member that is gone by the time of the restart holds nothing.
    class Reflectors:
        class nodes:  # noqa: N801 - a stand-in for the reflector attribute
            @staticmethod
            def items() -> list[Any]:
                return nodes

        class pods:  # noqa: N801
            @staticmethod
            def items() -> list[Any]:
                return [first]

    g3 = ClusterGraph(EXAMPLES, [])
    l3 = Ledger(g3)
    recover_from_cluster(Reflectors, g3, l3)  # type: ignore[arg-type]
    assert sorted(l3.holdings()) == ["default/w0"]
    assert sum(u["core"]["allocated"] for u in g3.node_usage().values()) == 2000


def test_a_groups_priority_and_disruption_mode_survive_a_restart() -> None:
    """A PodGroup's priority (not its pods') and single disruption come back from the record."""
    nodes = [make_node("a", cpu="4")]
    l1 = Ledger(ClusterGraph(EXAMPLES, nodes))
    gang = [make_pod(f"w{i}", cpu="1", group="g") for i in range(2)]
    assert l1.place("default/g", gang, priority=700, singly=True).status == "allocated"
    h0 = l1.commit("default/w0", gang[0].metadata.uid, "a")
    assert (h0.priority, h0.singly, h0.unit) == (700, True, "pod default/w0")
    first = bound(gang[0], "a", l1.annotations(h0))
    l2 = Ledger(ClusterGraph(EXAMPLES, nodes))
    l2.observe(first)
    l2.observe(gang[1])
    for key in ("default/w0", "default/w1"):
        h = l2.get(key)
        assert h is not None and (h.priority, h.singly) == (700, True), key
    # A record without them (a group placed at priority 0, whole; or an older record):
    # the pod's own priority, the whole group.
    l3 = Ledger(ClusterGraph(EXAMPLES, nodes))
    assert l3.place("default/g", gang).status == "allocated"
    plain = l3.annotations(l3.commit("default/w0", gang[0].metadata.uid, "a"))
    record = json.loads(plain[names.ANNOTATION_ALLOCATION])
    assert "priority" not in record and "singly" not in record
    l4 = Ledger(ClusterGraph(EXAMPLES, nodes))
    l4.observe(bound(gang[0], "a", plain))
    h = l4.get("default/w0")
    assert h is not None and (h.priority, h.singly, h.unit) == (0, False, "default/g")
