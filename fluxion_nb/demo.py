"""An offline placement demo on a bundled example cluster (no Kubernetes needed)."""

from __future__ import annotations

from fluxion_nb.examples import pooled_cluster, slot_jobspec
from fluxion_nb.graph import Graph


def main() -> None:
    cluster = pooled_cluster(nodes=3, cpus_milli=4000, memory_mib=8192)
    print("Cluster: 3 nodes x (4 CPUs, 8 GiB); pools shared by pods (partial-pool mode)\n")
    for policy in ("first", "lonode"):
        g = Graph(cluster, policy=policy, partial_pools={"core", "memory"})
        print(f"policy={policy}")
        for name, slots, cpu, mem in [
            ("gang-a", 4, 1000, 1024),
            ("gang-b", 6, 1000, 2048),
            ("gang-c", 4, 1000, 1024),
        ]:
            a = g.match(slot_jobspec(slots, cpu, mem))
            placed = ", ".join(f"{node}: {res}" for node, res in a.by_node().items()) or "-"
            print(f"  {name}: {slots} pods x ({cpu}m CPU, {mem} MiB) -> {a.status:9} {placed}")
        big = slot_jobspec(20, 1000, 1024)
        print(f"  a gang of 20 such pods can ever fit: {g.satisfiable(big)}\n")


if __name__ == "__main__":
    main()
