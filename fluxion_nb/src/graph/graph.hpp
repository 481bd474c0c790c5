// The resource graph: vertices (resource pools), the edges of the dominant
// subsystem (containment unless told otherwise), the indexes flux-sched
// keeps (by path, type, name, rank) and per-vertex scheduling state
// (planners, allocation records, traversal marks).
#pragma once
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "util/flat_map.hpp"
#include "util/lazy.hpp"
#include "planner/planner.hpp"
#include "util/str_index.hpp"
#include "util/string_pool.hpp"

namespace fluxion {

constexpr int64_t kXCheckerJobs = int64_t{1} << 30;

// Start of the error a JGF document gets when it brings a second root
// (resource-query reports that case in words of its own).
constexpr const char *kDuplicateRoot = "JGF: duplicate containment root";

// Resource types are interned: each graph numbers type names in the order
// flux-sched's interner would, and that number is the type's sort order.
class TypeTable {
   public:
    TypeTable();
    int intern(const std::string &name);
    int find(const std::string &name) const;  // -1 when unknown
    const std::string &name(int id) const { return names_[static_cast<size_t>(id)]; }
    size_t size() const { return names_.size(); }

    int cluster, core, socket, gpu, node, rack, slot, xor_slot, storage_node;

   private:
    std::vector<std::string> names_;
    std::unordered_map<std::string, int> ids_;
};

enum class Status { Up = 0, Down = 1 };

// Strings are views into the graph's StringPool; containers that are empty
// for most vertices are Lazy, so a vertex that holds nothing stays small.
struct Vertex {
    // The fields every walk and writer reads come first: one cache line.
    std::vector<int> out_edges;  // dominant-subsystem children, insertion order
    uint64_t color_epoch = 0;    // traversal mark
    int64_t size = 1;
    int64_t id = -1;
    int64_t rank = -1;
    int type = -1;
    Status status = Status::Up;
    bool partial_pool = false;  // slots take exactly their count from this pool
    bool removed = false;
    // Bookkeeping below this vertex is pending (see deferred_holds.cpp).
    bool deferred = false;
    // Has out-edges in a subsystem other than the dominant one. flux-sched
    // counts those when it decides whether a vertex is a leaf.
    bool foreign_children = false;
    int parent_edge = -1;  // first in-edge of the dominant subsystem (others make it shared)
    std::string_view basename;
    std::string_view name;
    std::string_view unit;
    std::string_view path;  // containment path ("" if not in containment)
    int64_t uniq_id = -1;
    Lazy<std::map<std::string, std::string>> other_paths;  // other subsystems
    Lazy<std::map<std::string, std::string>> properties;

    std::vector<int> by_outedges;  // out_edges, ordered for first-match policies

    // Scheduling state.
    Planner plans;
    Planner x_checker;
    std::unique_ptr<PlannerMulti> subplan;
    FlatMap<int64_t, int64_t> allocations;   // jobid -> span in plans
    FlatMap<int64_t, int64_t> reservations;  // jobid -> span in plans
    FlatSet<int64_t> tags;
    FlatMap<int64_t, int64_t> x_spans;       // jobid -> span in x_checker
    FlatMap<int64_t, int64_t> job2span;      // jobid -> span in subplan
};

// Scheduling state for jobs on up to `vertices` vertices (two planner states
// and the first blocks of their per-job tables each), taken from memory now
// instead of as placements arrive: a page's first touch costs microseconds,
// and a placement touches a few hundred bytes per vertex it lands on.
void reserve_scheduling_state(size_t vertices);

// Only the dominant subsystem's edges are kept: matching walks no other.
struct Edge {
    int source = -1;
    int target = -1;
    bool removed = false;
    int exclusive = 0;
    // Set by the matcher for the update walk.
    uint64_t needs = 0;
    uint64_t seq = 0;
    uint64_t weight = std::numeric_limits<uint64_t>::max();
};

struct GraphOptions {
    // The dominant subsystem: the tree of its edges is what matching walks.
    std::string subsystem = "containment";
    int64_t start = 0;
    int64_t duration = 3153600000;  // 100 years in seconds, as resource-query
    // Types whose pool vertices are shared by slots unit by unit instead of
    // whole ("*" means every type). Empty keeps Fluxion's semantics.
    std::set<std::string> partial_pool_types;
};

class Graph {
   public:
    explicit Graph(GraphOptions opts = {});
    Graph(const Graph &) = delete;
    Graph &operator=(const Graph &) = delete;

    TypeTable types;
    std::vector<Vertex> vertices;
    std::vector<Edge> edges;
    int root = -1;  // root of the dominant subsystem
    int64_t nodes_up = 0;
    // Subsystem names in the order the graph first named them (containment
    // first), the order flux-sched writes a vertex's paths in.
    std::vector<std::string> subsystems{"containment"};

    StringPool strings;  // vertex names, paths, JGF ids
    struct PathOf {
        const std::vector<Vertex> *vs;
        std::string_view operator()(int v) const { return (*vs)[static_cast<size_t>(v)].path; }
    };
    StrIndex<PathOf> by_path{PathOf{&vertices}};
    std::vector<std::vector<int>> by_type;  // indexed by type id

    const GraphOptions &options() const { return opts_; }
    const std::string &subsystem() const { return opts_.subsystem; }
    int64_t start() const { return opts_.start; }
    int64_t end() const { return opts_.start + opts_.duration; }
    int64_t duration() const { return opts_.duration; }
    // A vertex's planners run from the start to INT64_MAX, as Fluxion's readers
    // make them: only a job's own time is bounded by end(), so a job may start
    // before the end and run past it (its duration is then cut to the end).
    int64_t plan_duration() const { return std::numeric_limits<int64_t>::max() - opts_.start; }

    // Load a JGF document (replacing nothing: the graph must be empty).
    void load_jgf(std::string_view text);
    // Add the vertices and edges of a JGF subgraph whose top vertex's parent
    // already exists (grow). Returns the new vertices.
    std::vector<int> attach_jgf(std::string_view text);
    // Detach the subtree rooted at `v` (shrink); vertices stay as tombstones.
    std::vector<int> detach_subtree(int v);

    // The vertex at `path` in any subsystem, or -1.
    int find_path(std::string_view path) const;
    // The path of `v` in subsystem `ss`, "" if `v` is not in it.
    std::string_view path_in(int v, const std::string &ss) const;
    // Its dominant-subsystem path, else its containment path, else any.
    std::string_view some_path(int v) const;
    void subtree(int v, std::vector<int> &out) const;  // pre-order, v included
    // Deepest containment tree accepted (the walks recurse once per level).
    static constexpr int kMaxTreeDepth = 1024;

    int parent(int v) const {
        int e = vertices[static_cast<size_t>(v)].parent_edge;
        return e < 0 ? -1 : edges[static_cast<size_t>(e)].source;
    }
    bool is_leaf(int v) const { return vertices[static_cast<size_t>(v)].out_edges.empty(); }

    // Keep `by_outedges` of `v` sorted by (weight, uniq_id) descending.
    void resort_outedge(int v, int e);

    void set_status(int v, Status s);

    // True once some vertex has more than one containment parent (the
    // containment graph is then a DAG, not a tree).
    bool has_shared_children() const { return shared_children_; }

   private:
    friend class JgfReader;  // readers/jgf.hpp builds and indexes vertices
    GraphOptions opts_;
    bool shared_children_ = false;
    struct KeyOf {
        const std::vector<std::string_view> *keys;
        std::string_view operator()(int v) const { return (*keys)[static_cast<size_t>(v)]; }
    };
    std::vector<std::string_view> vertex_key_;               // vertex -> JGF outer id
    StrIndex<KeyOf> key_to_vertex_{KeyOf{&vertex_key_}};    // JGF outer id -> vertex
    // Paths in subsystems other than containment (views into other_paths).
    std::unordered_map<std::string_view, int> other_path_index_;
    std::set<std::string> rooted_;  // subsystems that have a root
    void index_vertex(int v);
    void unindex_vertex(int v);
    void add_edge(int src, int tgt);
};

}  // namespace fluxion
