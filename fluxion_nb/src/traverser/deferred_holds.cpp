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
#include "traverser/traverser.hpp"

namespace fluxion {

bool Traverser::defers_below(int u, bool mod, const JobMeta &m, bool full) const {
    return defer_ && !shared_ && mod && full && g_.vertices[static_cast<size_t>(u)].type == g_.types.node &&
           (m.alloc_type == AllocType::Alloc || m.alloc_type == AllocType::AllocOrReserve);
}

// The dominant tree in post-order: the order in which the update walk would
// emit a subtree (children before parents, each vertex's parent edge beside
// it). The vertices below any vertex then form one run of it, so a node held
// whole is emitted by reading that run instead of walking its subtree.
void Traverser::build_shadow_order() {
    shadow_order_.clear();
    shadow_first_.assign(g_.vertices.size(), 0);
    shadow_pos_.assign(g_.vertices.size(), -1);
    shadow_valid_ = true;
    if (g_.root < 0 || shared_) return;
    shadow_order_.reserve(g_.vertices.size());
    struct Frame {
        int vertex, edge, depth;
        size_t next;  // index of the next out-edge to follow
    };
    std::vector<Frame> stack{{g_.root, -1, 0, 0}};
    shadow_pos_[static_cast<size_t>(g_.root)] = -2;
    while (!stack.empty()) {
        Frame &f = stack.back();
        const std::vector<int> &outs = V(f.vertex).out_edges;
        if (f.next < outs.size()) {
            int e = outs[f.next++];
            int tgt = E(e).target;
            if (shadow_pos_[static_cast<size_t>(tgt)] != -1) continue;  // reached before (not a tree)
            shadow_pos_[static_cast<size_t>(tgt)] = -2;                   // on the way
            shadow_first_[static_cast<size_t>(tgt)] = static_cast<int>(shadow_order_.size());
            stack.push_back(Frame{tgt, e, f.depth + 1, 0});
            continue;
        }
        shadow_pos_[static_cast<size_t>(f.vertex)] = static_cast<int>(shadow_order_.size());
        shadow_order_.push_back(ShadowEntry{f.vertex, f.edge, f.depth});
        stack.pop_back();
    }
}

int Traverser::defer_below(int u, Emission &out, const JobMeta &m, TypeCounts &dfu) {
    if (!shadow_valid_) build_shadow_order();
    const size_t first = static_cast<size_t>(shadow_first_[static_cast<size_t>(u)]);
    const int pos = shadow_pos_[static_cast<size_t>(u)];
    if (pos < 0) return 0;  // not below the root: no walk gets here
    const size_t last = static_cast<size_t>(pos);
    // Each vertex below is allocated whole, so what reaches u's aggregate is
    // the sum of their sizes per pruning type.
    shadow_sums_.assign(g_.types.size(), 0);
    shadow_seen_.assign(g_.types.size(), 0);
    const ShadowEntry *order = shadow_order_.data();
    int64_t *sums = shadow_sums_.data();
    char *seen = shadow_seen_.data();
    Vertex *vs = g_.vertices.data();
    const uint64_t epoch = epoch_;
    for (size_t i = first; i < last; ++i) {
        Vertex &x = vs[static_cast<size_t>(order[i].vertex)];
        x.color_epoch = epoch;  // mark()
        sums[static_cast<size_t>(x.type)] += x.size;
        seen[static_cast<size_t>(x.type)] = 1;
    }
    // The entries themselves are written once the walk is over and the
    // emission's size is known: growing it node by node copied and touched
    // about twice its final size.
    if (last > first) {
        runs_.push_back(EmittedRun{first, last, level_ - order[last].depth});
        out.vertices.push_back(EmittedVertex{-static_cast<int>(runs_.size()), 0, true, 0});
        out.edges.push_back(-1);
    }
    for (size_t t = 0; t < shadow_sums_.size(); ++t)
        if (shadow_seen_[t]) accum_if(static_cast<int>(t), shadow_sums_[t], dfu);
    int n = static_cast<int>(V(u).out_edges.size());
    if (n > 0) {
        DeferredHold h{m, policy_.stop_on_1};
        h.m.constraint = nullptr;  // not needed to update, and may not outlive the match
        deferred_[u].push_back(std::move(h));
        V(u).deferred = true;
    }
    return n;
}

void Traverser::expand_runs(Emission &out) {
    if (runs_.empty()) return;
    std::vector<EmittedVertex> &vs = out.vertices;
    std::vector<int> &es = out.edges;
    const size_t held = vs.size();
    size_t total = held - runs_.size();
    for (const EmittedRun &r : runs_) total += r.last - r.first;
    // Every entry but the last ones (the walk's root) came with its parent
    // edge, and so does every entry of a run.
    const size_t with_edge = es.size();
    vs.resize(total);
    es.resize(total - (held - with_edge));
    // In place, from the back: no run is empty, so an entry's new place is
    // never before its old one, and nothing is overwritten before it is read.
    // Plain pointers: the loops then keep them in registers instead of
    // reloading every vector's bounds after each store.
    EmittedVertex *v = vs.data();
    int *e = es.data();
    const ShadowEntry *order = shadow_order_.data();
    const Vertex *gv = g_.vertices.data();
    size_t j = total;
    for (size_t i = held; i-- > 0;) {
        if (v[i].vertex >= 0) {
            --j;
            if (i < with_edge) e[j] = e[i];
            v[j] = v[i];
            continue;
        }
        const EmittedRun &r = runs_[static_cast<size_t>(-v[i].vertex - 1)];
        for (size_t k = r.last; k-- > r.first;) {
            const ShadowEntry &s = order[k];
            --j;
            v[j] = EmittedVertex{s.vertex, gv[static_cast<size_t>(s.vertex)].size, true, r.base + s.depth};
            e[j] = s.edge;
        }
    }
    runs_.clear();
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
    std::vector<EmittedRun> saved_runs = std::move(runs_);  // the interrupted walk's
    runs_.clear();
    for (const DeferredHold &h : holds) {
        epoch_ = ++settle_epoch_;
        Emission scratch;
        TypeCounts dfu;
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
    runs_ = std::move(saved_runs);
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
