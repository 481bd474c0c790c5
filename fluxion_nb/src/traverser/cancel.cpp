// Releasing a job: the cancel walk from the root (or over the vertices its
// emission listed), the scan for a job the root does not know, and the
// partial cancel of some of its vertices. Every vertex is released by one
// routine, release().
#include <map>

#include "traverser/traverser.hpp"

namespace fluxion {

void Traverser::mod_dfv(int u, int64_t jobid) {
    Vertex &x = V(u);
    mark(u);
    ++preorder_;
    if (!x.tags.count(jobid)) return;
    release(u, jobid);
    for (int e : V(u).out_edges) {
        int t = E(e).target;
        if (!visited(t)) mod_dfv(t, jobid);
    }
    ++postorder_;
}

// One vertex's share of releasing `jobid`: its tag, exclusivity span, span in
// the subtree aggregate and own allocation or reservation span; a deferred
// vertex first gets the bookkeeping it was spared. The units its allocation
// held (0 for a reservation).
int64_t Traverser::release(int u, int64_t jobid) {
    Vertex &x = V(u);
    x.tags.erase(jobid);
    touch(u);
    if (auto it = x.x_spans.find(jobid); it != x.x_spans.end()) {
        x.x_checker.rem_span(it->second);
        x.x_spans.erase(it);
    }
    if (x.subplan) {
        if (auto it = x.job2span.find(jobid); it != x.job2span.end()) {
            x.subplan->rem_span(it->second);
            x.job2span.erase(it);
        }
    }
    int64_t held = 0;
    if (auto it = x.allocations.find(jobid); it != x.allocations.end()) {
        held = x.plans.span_planned(it->second);
        x.plans.rem_span(it->second);
        x.allocations.erase(it);
    } else if (auto r = x.reservations.find(jobid); r != x.reservations.end()) {
        x.plans.rem_span(r->second);
        x.reservations.erase(r);
    }
    if (x.deferred) materialize(u);
    return held;
}

// The walk from the root reaches a vertex when its parent was released (a
// tree: one parent), releases it when it holds the job's tag, and counts a
// visit for the root and for every child of a released vertex. Backwards, the
// emission lists parents first, so a parent is settled before its children.
void Traverser::mod_listed(int64_t jobid, const std::vector<int> &listed) {
    preorder_ = 1;
    for (auto it = listed.rbegin(); it != listed.rend(); ++it) {
        int u = *it;
        // A removed subtree hangs under no out-edge any more: the walk never reaches it.
        if (u < 0 || static_cast<size_t>(u) >= g_.vertices.size() || visited(u) || V(u).removed) continue;
        if (u != g_.root) {
            int p = g_.parent(u);
            if (p < 0 || !visited(p)) continue;
        }
        if (!V(u).tags.count(jobid)) continue;
        mark(u);
        release(u, jobid);
        preorder_ += static_cast<unsigned>(V(u).out_edges.size());
        ++postorder_;
    }
}

// A job the root holds no tag of (a graph grown or shrunk under it): every
// vertex is looked at.
void Traverser::mod_exv(int64_t jobid) {
    settle();
    invalidate_memos();
    for (size_t v = 0; v < g_.vertices.size(); ++v)
        if (!g_.vertices[v].removed) release(static_cast<int>(v), jobid);
}

bool Traverser::cancel(int64_t jobid, const std::vector<int> *listed) {
    ++epoch_;
    // Counts of this walk, reported by resource-query's `cancel ... stats`.
    preorder_ = postorder_ = 0;
    if (g_.root >= 0 && V(g_.root).tags.count(jobid)) {
        if (listed && !listed->empty() && holds_.enabled() && !shared_)
            mod_listed(jobid, *listed);
        else
            mod_dfv(g_.root, jobid);
    } else
        mod_exv(jobid);
    return true;
}

bool Traverser::partial_cancel(int64_t jobid, const std::vector<int> &listed, bool &full) {
    settle();
    // Release the listed vertices' own holdings, then subtract what they
    // held from the aggregates of every ancestor.
    std::map<int, TypeCounts> minus;  // ancestor -> type -> amount
    for (int v : listed) {
        Vertex &x = V(v);
        if (!x.tags.count(jobid)) continue;
        int64_t amount = release(v, jobid);
        for (int p = g_.parent(v); p >= 0; p = g_.parent(p)) minus[p][x.type] += amount;
        touch_up(v);
    }
    // As flux-sched: an ancestor keeps the job's tag until its aggregate
    // span of the job is reduced to nothing. One that tracks no aggregate,
    // or holds no span of the job, keeps the tag (and the job stays).
    for (auto &kv : minus) {
        Vertex &a = V(kv.first);
        if (!a.tags.count(jobid) || !a.subplan) continue;
        auto it = a.job2span.find(jobid);
        if (it == a.job2span.end()) continue;
        bool removed = false;
        a.subplan->reduce_span(it->second, relevant_counts(*a.subplan, kv.second), removed,
                               hidden_.amounts(*a.subplan, kv.second));
        if (!removed) continue;
        a.job2span.erase(it);
        a.tags.erase(jobid);
        if (auto s = a.x_spans.find(jobid); s != a.x_spans.end()) {
            a.x_checker.rem_span(s->second);
            a.x_spans.erase(s);
        }
    }
    full = g_.root < 0 || !V(g_.root).tags.count(jobid);
    return true;
}

}  // namespace fluxion
