"""Topology spread: the ``DoNotSchedule`` constraints, as kube-scheduler's PodTopologySpread
filter reads them.

A constraint counts the pods of the pod's namespace its selector picks in each domain
(the nodes sharing the ``topologyKey`` label value) among the nodes that count: those
carrying every constraint's key, admitted by the pod's node selector and required
affinity (``nodeAffinityPolicy: Honor``, the default) and, with ``nodeTaintsPolicy:
Honor``, whose taints it tolerates. A node may take the pod while its domain's count,
plus one if the selector picks the pod itself, exceeds the least count over the domains
by at most ``maxSkew`` (the least is 0 while there are fewer domains than
``minDomains``).

A pod the queue pins to a node passes kube-scheduler's check on almost any count (its
node affinity then admits one node, so one domain counts): the spread the user asked
for holds only if the queue keeps to it, which it does here with the pod as it was
before its release.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence

import msgspec

from fluence import names
from fluence.node_rules import unselected, untolerated
from fluence.pod_affinity import selects
from fluence.pods import (
    LabelSelector,
    LabelSelectorRequirement,
    Node,
    Pod,
    TopologySpreadConstraint,
    pod_requests,
)

HARD = "DoNotSchedule"


def hard_constraints(pod: Pod) -> list[TopologySpreadConstraint]:
    return [c for c in pod.spec.topology_spread_constraints if c.when_unsatisfiable == HARD]


def _selector(c: TopologySpreadConstraint, pod: Pod) -> LabelSelector | None:
    """The constraint's selector, with the pod's own values of ``matchLabelKeys`` added."""
    sel = c.label_selector
    extra = [
        LabelSelectorRequirement(k, "In", [pod.metadata.labels[k]])
        for k in c.match_label_keys
        if k in pod.metadata.labels
    ]
    if not extra:
        return sel
    base = sel if sel is not None else LabelSelector()
    return LabelSelector(base.match_labels, [*base.match_expressions, *extra])


class Spread:
    """One pod's hard spread constraints over the cluster as placed now; pods added as a
    group's members would be bound, one at a time."""

    def __init__(
        self,
        pod: Pod,
        nodes: Mapping[str, Node],
        placed: Iterable[tuple[str, Pod]],
    ) -> None:
        self.pod = pod
        self.rules = [(c, _selector(c, pod)) for c in hard_constraints(pod)]
        keys = [c.topology_key for c, _ in self.rules]
        self.domain: list[dict[str, str]] = []
        """Per constraint: node -> its domain, for the nodes that count."""
        for c, _ in self.rules:
            counted = {}
            for name, node in nodes.items():
                labels = node.metadata.labels
                if any(k not in labels for k in keys) or not _included(c, node, pod):
                    continue
                counted[name] = labels[c.topology_key]
            self.domain.append(counted)
        self.labels = {name: node.metadata.labels for name, node in nodes.items()}
        self.counts: list[Counter[str]] = [
            Counter(dict.fromkeys(d.values(), 0)) for d in self.domain
        ]
        ns = pod.metadata.namespace
        for where, other in placed:
            # As kube-scheduler: pods being deleted no longer count.
            if other.metadata.namespace == ns and not other.metadata.deletion_timestamp:
                self.add(other, where)

    def add(self, pod: Pod, node: str) -> None:
        """``pod`` is on ``node`` now: count it where its labels are picked."""
        for (_, sel), domain, counts in zip(self.rules, self.domain, self.counts, strict=True):
            if node in domain and selects(sel, pod.metadata.labels):
                counts[domain[node]] += 1

    def admits(self, pod: Pod, node: str) -> bool:
        """May ``pod`` (one with these constraints) go to ``node`` now?"""
        for (c, sel), counts in zip(self.rules, self.counts, strict=True):
            value = self.labels.get(node, {}).get(c.topology_key)
            if value is None:
                return False
            least = min(counts.values(), default=0)
            if c.min_domains is not None and len(counts) < c.min_domains:
                least = 0
            mine = 1 if selects(sel, pod.metadata.labels) else 0
            if counts.get(value, 0) + mine - least > c.max_skew:
                return False
        return True

    def refusing(self, nodes: Iterable[str]) -> set[str]:
        """The nodes of ``nodes`` the pod may not go to now."""
        return {n for n in nodes if not self.admits(self.pod, n)}


def _included(c: TopologySpreadConstraint, node: Node, pod: Pod) -> bool:
    if (c.node_affinity_policy or "Honor") == "Honor" and unselected(node, pod):
        return False
    return not ((c.node_taints_policy or "Ignore") == "Honor" and untolerated(node, pod))


def refusing(
    pods: Sequence[Pod], nodes: Mapping[str, Node], placed: Iterable[tuple[str, Pod]]
) -> dict[str, set[str]]:
    """Per pod of ``pods`` with hard constraints, the nodes kube-scheduler's spread rule,
    read before the pin, keeps it out of with the pods placed now."""
    out: dict[str, set[str]] = {}
    on = list(placed)
    seen: dict[bytes, set[str]] = {}
    for p in pods:
        if not hard_constraints(p):
            continue
        sig = _signature(p)
        if sig not in seen:
            seen[sig] = Spread(p, nodes, on).refusing(nodes)
        out[p.key] = seen[sig]
    return out


def _signature(pod: Pod) -> bytes:
    """What a pod's spread depends on: members alike share one view."""
    spec = pod.spec
    return msgspec.json.encode(
        (
            pod.metadata.namespace,
            pod.metadata.labels,
            spec.topology_spread_constraints,
            spec.node_selector,
            spec.affinity.node_affinity if spec.affinity else None,
            spec.tolerations,
        )
    )


def unspread(
    matched: Sequence[tuple[Pod, str]],
    nodes: Mapping[str, Node],
    placed: Iterable[tuple[str, Pod]],
) -> set[str]:
    """Nodes of members a match put where their spread would not take them, however
    kube-scheduler orders the group's binds (each one it refuses is retried after the
    next bind, as it does): left out of the next match."""
    spreading = [(p, n) for p, n in matched if hard_constraints(p)]
    if not spreading:
        return set()
    on = list(placed)
    shared: dict[bytes, Spread] = {}
    views: dict[str, Spread] = {}
    for p, _ in spreading:
        sig = _signature(p)
        if sig not in shared:
            shared[sig] = Spread(p, nodes, on)
        views[p.key] = shared[sig]
    waiting = list(matched)
    progress = True
    while waiting and progress:
        progress = False
        for p, node in list(waiting):
            view = views.get(p.key)
            if view is not None and not view.admits(p, node):
                continue
            waiting.remove((p, node))
            for v in shared.values():
                if p.metadata.namespace == v.pod.metadata.namespace:
                    v.add(p, node)
            progress = True
    return {n for _, n in waiting}


def shares(
    pods: Sequence[Pod],
    nodes: Mapping[str, Node],
    placed: Iterable[tuple[str, Pod]],
    free: Callable[[], Mapping[str, Mapping[str, int]] | None] | None = None,
) -> dict[str, set[str]]:
    """Per member of ``pods`` alike in a spread over domains wider than a node (zones,
    racks), the nodes outside the domain it is dealt: each member goes to the domain with
    the fewest pods of its kind at that point, so one match places them as evenly as
    kube-scheduler's check asks (left to themselves, a match packs them into one domain,
    and a few tries seldom undo that). With ``free`` (node -> graph type -> free units)
    a domain is dealt no more members than its nodes have room for while another has
    room, and of the domains with the fewest the roomiest goes first: an even deal that
    a full zone breaks is dealt round it (a wider ``maxSkew`` allows that too). ``free``
    is called only when some members are dealt out."""
    out: dict[str, set[str]] = {}
    on = list(placed)
    alike: dict[bytes, list[Pod]] = {}
    for p in pods:
        rules = [(c, _selector(c, p)) for c in hard_constraints(p)]
        dealt_by = next((sel for c, sel in rules if _dealt(c)), None)
        if dealt_by is None or not selects(dealt_by, p.metadata.labels):
            continue  # no such spread, or one that does not count the member itself
        alike.setdefault(_rules_signature(p, rules), []).append(p)
    for members in alike.values():
        if len(members) < 2:
            continue
        view = Spread(members[0], nodes, on)
        rule = next(i for i, (c, _) in enumerate(view.rules) if _dealt(c))
        domain, counts = view.domain[rule], Counter(view.counts[rule])
        if not counts:
            continue
        asks, units = pod_requests(members[0]), free() if free is not None else None
        room = _room(domain, units, asks) if units is not None and asks else None
        dealt: list[str] = []
        for _ in members:
            fits = [d for d in counts if room is None or room[d] > 0] or list(counts)
            pick = min(fits, key=lambda d: (counts[d], -room[d] if room else 0, d))
            counts[pick] += 1
            if room is not None:
                room[pick] -= 1
            dealt.append(pick)
        for p, value in zip(sorted(members, key=lambda m: m.key), dealt, strict=True):
            out[p.key] = {n for n in nodes if domain.get(n) != value}
    return out


def _room(
    domain: Mapping[str, str], free: Mapping[str, Mapping[str, int]], asks: Mapping[str, int]
) -> Counter[str]:
    """Per domain, how many pods asking ``asks`` (graph units) its nodes' free units take."""
    out: Counter[str] = Counter(dict.fromkeys(domain.values(), 0))
    for n, d in domain.items():
        have = free.get(n, {})
        out[d] += max(0, min(have.get(t, 0) // q for t, q in asks.items()))
    return out


def _rules_signature(
    pod: Pod, rules: list[tuple[TopologySpreadConstraint, LabelSelector | None]]
) -> bytes:
    """What dealing a member out depends on: its namespace, its spread with the selectors
    its own labels make, and the nodes that count (members of an indexed Job differ in a
    label, not in this)."""
    spec = pod.spec
    return msgspec.json.encode(
        (
            pod.metadata.namespace,
            rules,
            spec.node_selector,
            spec.affinity.node_affinity if spec.affinity else None,
            spec.tolerations,
        )
    )


def _dealt(c: TopologySpreadConstraint) -> bool:
    """A spread :func:`shares` deals members out for (per node: :func:`spread_per_node`)."""
    return c.max_skew >= 1 and c.topology_key != names.LABEL_HOSTNAME


def spread_per_node(pods: Sequence[Pod]) -> list[tuple[str, str]]:
    """Pairs of ``pods`` one's per-node spread with ``maxSkew`` 1 counts the other in: they
    are matched on distinct nodes, in rounds of as many as there are nodes when there are
    more of them (:func:`fluence.group_jobspec.group_jobspecs`), the layout it asks for."""
    pairs = []
    for a in pods:
        for c in hard_constraints(a):
            if c.topology_key != names.LABEL_HOSTNAME or c.max_skew != 1:
                continue
            sel = _selector(c, a)
            pairs += [
                (a.key, b.key)
                for b in pods
                if b.key != a.key
                and b.metadata.namespace == a.metadata.namespace
                and selects(sel, b.metadata.labels)
            ]
    return pairs
