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
#include "traverser.hpp"

namespace fluxion {

bool Traverser::defers_below(int u, bool mod, const JobMeta &m, bool full) const {
    return defer_ && !shared_ && mod && full && g_.vertices[static_cast<size_t>(u)].type == g_.types.node &&
           (m.alloc_type == AllocType::Alloc || m.alloc_type == AllocType::AllocOrReserve);
}

// The emission upd_dfv produces below a vertex held whole, without touching
// any vertex's scheduling state. `sums` adds up sizes per type (pruning types
// are picked out by the caller).
void Traverser::shadow_upd(int u, Emission &out, std::vector<int64_t> &sums, std::vector<char> &seen) {
    level_++;
    mark(u);
    for (int e : V(u).out_edges) {
        int tgt = E(e).target;
        if (visited(tgt)) continue;
        shadow_upd(tgt, out, sums, seen);
        out.edges.push_back(e);
    }
    const Vertex &x = V(u);
    sums[static_cast<size_t>(x.type)] += x.size;
    seen[static_cast<size_t>(x.type)] = 1;
    out.vertices.push_back(EmittedVertex{u, x.size, true, level_});
    level_--;
}

int Traverser::defer_below(int u, Emission &out, const JobMeta &m, std::map<int, int64_t> &dfu) {
    // Each vertex below is allocated whole, so what reaches u's aggregate is
    // the sum of their sizes per pruning type.
    std::vector<int64_t> sums(g_.types.size(), 0);
    std::vector<char> seen(g_.types.size(), 0);
    int n = 0;
    for (int e : V(u).out_edges) {
        int tgt = E(e).target;
        if (visited(tgt)) continue;
        shadow_upd(tgt, out, sums, seen);
        out.edges.push_back(e);
        n++;
    }
    for (size_t t = 0; t < sums.size(); ++t)
        if (seen[t]) accum_if(static_cast<int>(t), sums[t], dfu);
    if (n > 0) {
        DeferredHold h{m, policy_.stop_on_1};
        h.m.constraint = nullptr;  // not needed to update, and may not outlive the match
        deferred_[u].push_back(std::move(h));
        V(u).deferred = true;
    }
    return n;
}

void Traverser::materialize(int u) {
    auto it = deferred_.find(u);
    V(u).deferred = false;
    if (it == deferred_.end()) return;
    std::vector<DeferredHold> holds = std::move(it->second);
    deferred_.erase(it);
    // A walk of its own: fresh marks (restored after), scratch emission and
    // level, and no message left behind for the operation that triggered it.
    uint64_t saved_epoch = epoch_;
    int saved_level = level_;
    std::string saved_msg = err_msg_;
    for (const DeferredHold &h : holds) {
        epoch_ = ++settle_epoch_;
        Emission scratch;
        std::map<int, int64_t> dfu;
        for (int e : V(u).out_edges) {
            int tgt = E(e).target;
            if (visited(tgt)) continue;
            int sub = upd_dfv(tgt, scratch, static_cast<uint64_t>(V(tgt).size), true, h.m, true, dfu, true);
            if (sub > 0 && h.stop_on_1) upd_by_outedges(h.m, u, e);
        }
    }
    epoch_ = saved_epoch;
    level_ = saved_level;
    err_msg_ = std::move(saved_msg);
}

void Traverser::settle() {
    while (!deferred_.empty()) materialize(deferred_.begin()->first);
}

void Traverser::settle_above(int v) {
    std::vector<int> up;
    for (int p = g_.parent(v); p >= 0; p = g_.parent(p))
        if (V(p).deferred) up.push_back(p);
    for (auto it = up.rbegin(); it != up.rend(); ++it) materialize(*it);
}

}  // namespace fluxion
