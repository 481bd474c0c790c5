// Reading a JSON Graph Format document into a Graph, as a sequence of named
// steps: read each vertex while the text parses, check the document's shape
// and roots, read each edge, check that the new tree is reachable, acyclic
// and not too deep, then commit. Everything before the commit only looks at
// the graph, so bad input leaves it exactly as it was (the vertices built on
// the way are rolled back).
#pragma once
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>

#include "graph/graph.hpp"
#include "util/json.hpp"
#include "util/str_index.hpp"
#include "util/string_pool.hpp"

namespace fluxion {

class JgfReader {
   public:
    // `attach`: add a subgraph to a loaded graph (grow) instead of loading one.
    JgfReader(Graph &g, std::string_view text, bool attach);
    ~JgfReader();
    JgfReader(const JgfReader &) = delete;
    JgfReader &operator=(const JgfReader &) = delete;

    // Run every step; the new vertices. Throws InputError, changing nothing.
    std::vector<int> read();

   private:
    // One JGF vertex read: an existing vertex (attach) or a new one, built at
    // the end of the graph's vertices but indexed nowhere yet.
    struct Pending {
        std::string_view key;
        std::string_view type_name;
        int vertex;  // existing vertex, or index the new one got
        bool existing = false;
        bool root = false;    // root of the dominant subsystem
        bool in_dom = false;  // has a path in the dominant subsystem
        int parents = 0;      // dominant edges reaching a new vertex
    };
    struct PendingEdge {
        int src, tgt;
    };
    struct KeyOfPending {
        const std::vector<Pending> *pend;
        std::string_view operator()(int k) const { return (*pend)[static_cast<size_t>(k)].key; }
    };
    // Small decimal ids ("0", "17", as flux-sched and fluence write them) find
    // their pending vertex through an array instead of a hash lookup.
    class NumberedIds {
       public:
        explicit NumberedIds(size_t capacity) : at_(capacity, -1) {}
        // The slot of a canonical decimal id below the capacity, else null.
        int *slot(std::string_view key) {
            if (key.empty() || key.size() > 9 || (key[0] == '0' && key.size() > 1)) return nullptr;
            size_t n = 0;
            for (char c : key) {
                if (c < '0' || c > '9') return nullptr;
                n = n * 10 + static_cast<size_t>(c - '0');
            }
            return n < at_.size() ? &at_[n] : nullptr;
        }

       private:
        std::vector<int> at_;
    };

    Graph &g_;
    std::string_view text_;
    bool attach_;
    const std::string &dom_;
    const int first_new_;
    bool committed_ = false;
    StringPool scratch_;  // ids written as integers, default names
    std::vector<Pending> pend_;
    StrIndex<KeyOfPending> new_keys_;                // id -> index in pend_
    StrIndex<Graph::PathOf> new_paths_;              // containment paths of the new vertices
    std::unordered_set<std::string_view> new_other_paths_;  // their paths in other subsystems
    std::map<std::string, int> new_roots_;           // subsystem -> roots among them
    std::vector<std::string> new_subsystems_;        // subsystems the graph did not name yet
    NumberedIds numbered_;
    size_t nodes_seen_ = 0;
    std::string node_error_;  // the first vertex error, reported once the text has parsed
    std::vector<PendingEdge> edges_;     // dominant-subsystem edges only
    std::vector<int> foreign_parents_;   // sources of edges in other subsystems
    std::vector<int> new_parent_;        // per new vertex: its first dominant parent, -1 if none
    bool shared_ = false;                // some new vertex has more than one parent
    std::set<std::pair<int, int>> extra_parent_edges_;

    // Step 1, per element of graph.nodes while the text parses.
    void on_vertex(const json::Node &n, const json::Node *next);
    void read_vertex(const json::Node &n);
    void prefetch_slots(const json::Node &next);
    void note_subsystem(std::string_view ss);
    int new_key_index(std::string_view key);
    // Step 2: the document's shape, the first vertex error, the roots.
    const json::Node *check_document(const json::Node &doc);
    // Step 3, per element of graph.edges.
    void read_edge(const json::Node &e, size_t j);
    // Step 4: the new vertices form a tree under the root (or the attach point).
    void check_reached();
    void check_no_cycles();
    void check_depth();
    void check_shared_cycles() const;
    // Step 5: index the new vertices, intern their strings, add the edges.
    std::vector<int> commit();
};

}  // namespace fluxion
