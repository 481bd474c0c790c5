// Small JGF graphs for the gtests, written with one builder.
#pragma once
#include <cstdint>
#include <string>

namespace fluxion::test_graphs {

// Appends containment vertices and edges; text() is the JGF document.
class JgfBuilder {
   public:
    // A vertex (size and rank left out of the metadata when negative); returns its JGF id.
    int vertex(const std::string &type, const std::string &name, int64_t idx, const std::string &path,
               int64_t size = -1, int64_t rank = -2) {
        if (!nodes_.empty()) nodes_ += ",";
        nodes_ += "{\"id\":\"" + std::to_string(next_) + "\",\"metadata\":{\"type\":\"" + type + "\",\"name\":\"" +
                  name + "\",\"id\":" + std::to_string(idx);
        if (size >= 0) nodes_ += ",\"size\":" + std::to_string(size);
        if (rank >= -1) nodes_ += ",\"rank\":" + std::to_string(rank);
        nodes_ += ",\"paths\":{\"containment\":\"" + path + "\"}}}";
        return next_++;
    }
    void edge(int s, int t) {
        if (!edges_.empty()) edges_ += ",";
        edges_ += "{\"source\":\"" + std::to_string(s) + "\",\"target\":\"" + std::to_string(t) + "\"}";
    }
    std::string text() const { return "{\"graph\":{\"nodes\":[" + nodes_ + "],\"edges\":[" + edges_ + "]}}"; }

   private:
    std::string nodes_, edges_;
    int next_ = 0;
};

// root -> node0..n-1 -> one core pool (`cores`) + one memory pool (8).
inline std::string pool_graph(int nnodes, int64_t cores, const std::string &root_name = "cluster") {
    JgfBuilder b;
    int root = b.vertex("cluster", root_name, 0, "/" + root_name, 1);
    for (int n = 0; n < nnodes; ++n) {
        std::string ns = std::to_string(n);
        std::string np = "/" + root_name + "/node" + ns;
        int nv = b.vertex("node", "node" + ns, n, np, 1);
        b.edge(root, nv);
        b.edge(nv, b.vertex("core", "core" + ns, n, np + "/core" + ns, cores));
        b.edge(nv, b.vertex("memory", "memory" + ns, n, np + "/memory" + ns, 8));
    }
    return b.text();
}

}  // namespace fluxion::test_graphs
