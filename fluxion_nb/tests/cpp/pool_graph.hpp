// A small JGF for the gtests: root -> node0..n-1 -> one core pool + one memory pool (8).
#pragma once
#include <cstdint>
#include <string>

namespace fluxion::test_graphs {

inline std::string pool_graph(int nnodes, int64_t cores, const std::string &root_name = "cluster") {
    std::string nodes, edges;
    int id = 0;
    auto vtx = [&](const std::string &type, const std::string &name, int64_t idx, const std::string &path,
                   int64_t size) {
        if (!nodes.empty()) nodes += ",";
        nodes += "{\"id\":\"" + std::to_string(id) + "\",\"metadata\":{\"type\":\"" + type + "\",\"name\":\"" +
                 name + "\",\"id\":" + std::to_string(idx) + ",\"size\":" + std::to_string(size) +
                 ",\"paths\":{\"containment\":\"" + path + "\"}}}";
        return id++;
    };
    auto edge = [&](int s, int t) {
        if (!edges.empty()) edges += ",";
        edges += "{\"source\":\"" + std::to_string(s) + "\",\"target\":\"" + std::to_string(t) + "\"}";
    };
    int root = vtx("cluster", root_name, 0, "/" + root_name, 1);
    for (int n = 0; n < nnodes; ++n) {
        std::string ns = std::to_string(n);
        std::string np = "/" + root_name + "/node" + ns;
        int nv = vtx("node", "node" + ns, n, np, 1);
        edge(root, nv);
        edge(nv, vtx("core", "core" + ns, n, np + "/core" + ns, cores));
        edge(nv, vtx("memory", "memory" + ns, n, np + "/memory" + ns, 8));
    }
    return "{\"graph\":{\"nodes\":[" + nodes + "],\"edges\":[" + edges + "]}}";
}

}  // namespace fluxion::test_graphs
