// Deferred bookkeeping under whole nodes held exclusively.
//
// A node allocated whole gives every vertex below it a span, a tag and an
// exclusivity mark: ~80 vertices per node on a typical graph, most of the
// cost of a node-exclusive match. Nothing reads those vertices until a walk
// descends below the node again (which the node's own span prevents for as
// long as the hold lasts), so the update walk records the node's own state
// as usual, emits the vertices below it, and leaves their bookkeeping as a
// pending record. Any walk that is about to look below such a node first
// applies its pending records, in order, with the very code the update walk
// would have run; operations that read vertices directly apply them all.
// The graph state anyone can observe is therefore the same as if the
// bookkeeping had been done at once.
//
// This object holds the pending records, the order in which a subtree is
// emitted without walking it, and the subtrees an update walk emitted that
// way; the traverser applies the records (Traverser::materialize), since
// applying them is its update walk.
#pragma once
#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <utility>
#include <vector>

#include "graph/graph.hpp"
#include "traverser/job.hpp"

namespace fluxion {

struct Emission;

// The dominant tree in post-order: the order in which the update walk would
// emit a subtree (children before parents, each vertex's parent edge beside
// it). The vertices below any vertex then form one run of it, so a node held
// whole is emitted by reading that run instead of walking its subtree.
class SubtreeOrder {
   public:
    struct Entry {
        int vertex;
        int edge;   // from its parent
        int depth;  // below the root
    };
    // Rebuild for `g`; empty when `shared` (not a tree).
    void build(const Graph &g, bool shared);
    // After any change to the graph's shape.
    void invalidate() { valid_ = false; }
    bool valid() const { return valid_; }
    // The entries of the vertices below u: [first, last), u's own entry at
    // `last`; false when u is not below the root (no walk gets there).
    bool below(int u, size_t &first, size_t &last) const {
        int pos = pos_[static_cast<size_t>(u)];
        if (pos < 0) return false;
        first = static_cast<size_t>(first_[static_cast<size_t>(u)]);
        last = static_cast<size_t>(pos);
        return true;
    }
    const Entry *entries() const { return order_.data(); }

   private:
    std::vector<Entry> order_;
    std::vector<int> first_;  // per vertex: first entry of its subtree
    std::vector<int> pos_;    // per vertex: its own entry (-1: not below the root)
    bool valid_ = false;
};

class DeferredHolds {
   public:
    // A job's bookkeeping left pending below one node.
    struct Hold {
        JobMeta m;
        bool stop_on_1;
    };

    // A subtree emitted whole: its entries in the order.
    struct Run {
        size_t first, last;
        int base;  // level of the subtree's root minus its depth
    };

    void set_enabled(bool on) { enabled_ = on; }
    bool enabled() const { return enabled_; }
    // Whether the update walk leaves the bookkeeping below `u` pending: a
    // node taken whole (`mod`, `full`) by an allocation or reservation, on a
    // tree (not `shared`).
    bool defers_below(const Graph &g, int u, bool mod, const JobMeta &m, bool full, bool shared) const {
        return enabled_ && !shared && mod && full && g.vertices[static_cast<size_t>(u)].type == g.types.node &&
               (m.alloc_type == AllocType::Alloc || m.alloc_type == AllocType::AllocOrReserve);
    }

    void add(int node, Hold h) { pending_[node].push_back(std::move(h)); }
    // The node's pending holds, oldest first, now no longer pending.
    std::vector<Hold> take(int node) {
        std::vector<Hold> holds;
        auto it = pending_.find(node);
        if (it == pending_.end()) return holds;
        holds = std::move(it->second);
        pending_.erase(it);
        return holds;
    }
    bool empty() const { return pending_.empty(); }
    // Some node with holds pending (when not empty()).
    int any() const { return pending_.begin()->first; }
    // A mark epoch for applying one hold, apart from the walks' own.
    uint64_t next_epoch() { return ++settle_epoch_; }

    SubtreeOrder &order() { return order_; }
    // Stand in for u's subtree in an update walk's emission: one placeholder
    // entry (vertex -1 - its run's index) that expand() replaces with the
    // run [first, last) of the order, at levels from `base`.
    void emit_run(size_t first, size_t last, int base, Emission &out);
    // Write every run of the walk in place of its placeholder.
    void expand(Emission &out, const Graph &g);
    void clear_runs() { runs_.clear(); }
    // The runs of a walk interrupted by applying holds (which walk too).
    std::vector<Run> suspend() { return std::exchange(runs_, {}); }
    void resume(std::vector<Run> runs) { runs_ = std::move(runs); }

    // Per-type scratch for summing a subtree's sizes.
    std::vector<int64_t> sums;
    std::vector<char> seen;

   private:
    std::unordered_map<int, std::vector<Hold>> pending_;  // node -> holds, oldest first
    uint64_t settle_epoch_ = uint64_t{1} << 62;           // marks apart from the walks' epochs
    bool enabled_ = true;
    SubtreeOrder order_;
    std::vector<Run> runs_;
};

}  // namespace fluxion
