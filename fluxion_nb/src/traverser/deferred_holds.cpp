// Deferred bookkeeping under whole nodes held exclusively (see
// deferred_holds.hpp), and the traverser's side of it: leaving a node's
// bookkeeping pending in the update walk, and applying it before anything
// looks below the node.
#include "traverser/deferred_holds.hpp"

#include "traverser/traverser.hpp"

namespace fluxion {

void SubtreeOrder::build(const Graph &g, bool shared) {
    order_.clear();
    first_.assign(g.vertices.size(), 0);
    pos_.assign(g.vertices.size(), -1);
    valid_ = true;
    if (g.root < 0 || shared) return;
    order_.reserve(g.vertices.size());
    struct Frame {
        int vertex, edge, depth;
        size_t next;  // index of the next out-edge to follow
    };
    std::vector<Frame> stack{{g.root, -1, 0, 0}};
    pos_[static_cast<size_t>(g.root)] = -2;
    while (!stack.empty()) {
        Frame &f = stack.back();
        const std::vector<int> &outs = g.vertices[static_cast<size_t>(f.vertex)].out_edges;
        if (f.next < outs.size()) {
            int e = outs[f.next++];
            int tgt = g.edges[static_cast<size_t>(e)].target;
            if (pos_[static_cast<size_t>(tgt)] != -1) continue;  // reached before (not a tree)
            pos_[static_cast<size_t>(tgt)] = -2;                  // on the way
            first_[static_cast<size_t>(tgt)] = static_cast<int>(order_.size());
            stack.push_back(Frame{tgt, e, f.depth + 1, 0});
            continue;
        }
        pos_[static_cast<size_t>(f.vertex)] = static_cast<int>(order_.size());
        order_.push_back(Entry{f.vertex, f.edge, f.depth});
        stack.pop_back();
    }
}

void DeferredHolds::emit_run(size_t first, size_t last, int base, Emission &out) {
    runs_.push_back(Run{first, last, base});
    out.vertices.push_back(EmittedVertex{-static_cast<int>(runs_.size()), 0, true, 0});
    out.edges.push_back(-1);
}

void DeferredHolds::expand(Emission &out, const Graph &g) {
    if (runs_.empty()) return;
    std::vector<EmittedVertex> &vs = out.vertices;
    std::vector<int> &es = out.edges;
    const size_t held = vs.size();
    size_t total = held - runs_.size();
    for (const Run &r : runs_) total += r.last - r.first;
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
    const SubtreeOrder::Entry *order = order_.entries();
    const Vertex *gv = g.vertices.data();
    size_t j = total;
    for (size_t i = held; i-- > 0;) {
        if (v[i].vertex >= 0) {
            --j;
            if (i < with_edge) e[j] = e[i];
            v[j] = v[i];
            continue;
        }
        const Run &r = runs_[static_cast<size_t>(-v[i].vertex - 1)];
        for (size_t k = r.last; k-- > r.first;) {
            const SubtreeOrder::Entry &s = order[k];
            --j;
            v[j] = EmittedVertex{s.vertex, gv[static_cast<size_t>(s.vertex)].size, true, r.base + s.depth};
            e[j] = s.edge;
        }
    }
    runs_.clear();
}

int Traverser::defer_below(int u, Emission &out, const JobMeta &m, TypeCounts &dfu) {
    SubtreeOrder &order = holds_.order();
    if (!order.valid()) order.build(g_, shared_);
    size_t first = 0, last = 0;
    if (!order.below(u, first, last)) return 0;  // not below the root: no walk gets here
    // Each vertex below is allocated whole, so what reaches u's aggregate is
    // the sum of their sizes per pruning type.
    holds_.sums.assign(g_.types.size(), 0);
    holds_.seen.assign(g_.types.size(), 0);
    const SubtreeOrder::Entry *entries = order.entries();
    int64_t *sums = holds_.sums.data();
    char *seen = holds_.seen.data();
    Vertex *vs = g_.vertices.data();
    const uint64_t epoch = epoch_;
    for (size_t i = first; i < last; ++i) {
        Vertex &x = vs[static_cast<size_t>(entries[i].vertex)];
        x.color_epoch = epoch;  // mark()
        sums[static_cast<size_t>(x.type)] += x.size;
        seen[static_cast<size_t>(x.type)] = 1;
    }
    // The entries themselves are written once the walk is over and the
    // emission's size is known: growing it node by node copied and touched
    // about twice its final size.
    if (last > first) holds_.emit_run(first, last, level_ - entries[last].depth, out);
    for (size_t t = 0; t < holds_.sums.size(); ++t)
        if (holds_.seen[t]) accum_if(static_cast<int>(t), holds_.sums[t], dfu);
    int n = static_cast<int>(V(u).out_edges.size());
    if (n > 0) {
        DeferredHolds::Hold h{m, policy_.stop_on_1};
        h.m.constraint = nullptr;  // not needed to update, and may not outlive the match
        holds_.add(u, std::move(h));
        V(u).deferred = true;
    }
    return n;
}

void Traverser::materialize(int u) {
    V(u).deferred = false;
    std::vector<DeferredHolds::Hold> holds = holds_.take(u);
    if (holds.empty()) return;
    // A walk of its own: fresh marks (restored after), scratch emission and
    // level, and no message left behind for the operation that triggered it.
    uint64_t saved_epoch = epoch_;
    int saved_level = level_;
    std::string saved_msg = err_msg_;
    std::vector<DeferredHolds::Run> saved_runs = holds_.suspend();  // the interrupted walk's
    for (const DeferredHolds::Hold &h : holds) {
        epoch_ = holds_.next_epoch();
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
    holds_.resume(std::move(saved_runs));
}

void Traverser::settle() {
    while (!holds_.empty()) materialize(holds_.any());
}

void Traverser::settle_above(int v) {
    std::vector<int> up;
    for (int p = g_.parent(v); p >= 0; p = g_.parent(p))
        if (V(p).deferred) up.push_back(p);
    for (auto it = up.rbegin(); it != up.rend(); ++it) materialize(*it);
}

}  // namespace fluxion
