// The update walk: after a match chose its edges, record the allocation or
// reservation on every vertex under them (spans, tags, exclusivity, subtree
// aggregates) and emit what was taken; and the replay of a known allocation
// through the same walk.
#include <set>
#include <string>

#include "traverser/traverser.hpp"

namespace fluxion {

void Traverser::upd_by_outedges(const JobMeta &m, int u, int e) {
    Vertex &t = V(E(e).target);
    if (!t.subplan || t.subplan->size() == 0) return;
    int64_t avail = t.subplan->at(t.subplan->size() - 1).avail_at(m.now);
    if (avail == 0 && t.subplan->span_count() == 0) return;
    E(e).weight = avail == -1 ? 0 : static_cast<uint64_t>(avail);
    g_.resort_outedge(u, e);
}

int Traverser::upd_dfv(int u, Emission &out, uint64_t needs, bool excl, const JobMeta &m, bool full,
                       TypeCounts &to_parent, bool emit_shadow) {
    int n = 0;
    TypeCounts dfu;
    bool mod = emit_shadow || x_types_.count(type_of(u)) > 0;
    excl = excl || mod;
    level_++;
    mark(u);
    if (V(u).deferred) materialize(u);
    if (holds_.defers_below(g_, u, mod, m, full, shared_)) {
        n = defer_below(u, out, m, dfu);
    } else {
        auto child = [&](int e) {
            int tgt = E(e).target;
            if (visited(tgt)) return;
            bool x = E(e).exclusive != 0 || mod;
            uint64_t nd = mod ? static_cast<uint64_t>(V(tgt).size) : E(e).needs;
            int sub = upd_dfv(tgt, out, nd, x, m, full, dfu, mod);
            if (sub > 0) {
                if (policy_.stop_on_1) upd_by_outedges(m, u, e);
                out.edges.push_back(e);
                n += sub;
            }
        };
        if (!mod && wide_.covers(V(u).out_edges.size())) {
            // Out-edges are kept in id order, so the stamped ones sorted by id
            // come in the order the full loop below would meet them.
            wide_.for_each_stamped(u, child);
        } else {
            for (int e : V(u).out_edges) {
                // The edge's own stamp first: most out-edges of a big vertex were not
                // chosen, and reading it spares a cache miss on every unchosen target.
                if (E(e).seq != seq_ && !mod) continue;
                child(e);
            }
        }
    }
    Vertex &x = V(u);
    if (m.alloc_type == AllocType::NoAlloc) {
        if (excl) n++;
    } else {
        if (excl) {
            n++;
            if (full && m.alloc_type != AllocType::Satisfiability) {
                int64_t span = x.plans.add_span(m.at, m.duration, static_cast<int64_t>(needs));
                if (span < 0) {
                    err_msg_ += "upd_plan: planner_add_span failed on " + std::string(x.name) + ".\n";
                } else if (m.alloc_type == AllocType::Alloc) {
                    x.allocations[m.jobid] = span;
                } else {
                    x.reservations[m.jobid] = span;
                }
            }
        }
        if (n > 0) {
            x.tags.insert(m.jobid);
            int64_t xs = x.x_checker.add_span(m.at, m.duration, 1);
            if (xs >= 0) x.x_spans[m.jobid] = xs;
            if (x.subplan && !dfu.empty()) {
                int64_t sp = x.subplan->add_span(m.at, m.duration, relevant_counts(*x.subplan, dfu),
                                                 hidden_.amounts(*x.subplan, dfu));
                if (sp >= 0) x.job2span[m.jobid] = sp;
            }
            // A partial pool only gives up what it lent; Fluxion's whole-vertex
            // rule gives up the entire vertex when allocated exclusively.
            int64_t used = excl ? (x.partial_pool ? static_cast<int64_t>(needs) : x.size)
                                : x.size - static_cast<int64_t>(needs);
            accum_if(x.type, used, to_parent);
            for (auto &kv : dfu) accum_if(kv.first, kv.second, to_parent);
        }
    }
    if (n > 0) out.vertices.push_back(EmittedVertex{u, static_cast<int64_t>(needs), excl, level_});
    touch(u);
    level_--;
    return n;
}

bool Traverser::update(int root, Emission &out, JobMeta &m) {
    if (root_seq_ != seq_) {
        err_msg_ += "update: resource state wasn't properly set up for update.\n";
        return false;
    }
    ++epoch_;
    TypeCounts dfu;
    bool emit_shadow = x_types_.count(type_of(root)) > 0;
    level_ = 0;
    holds_.clear_runs();
    // Jobs tend to repeat their shape: size the emission like the last one.
    out.vertices.reserve(last_emitted_);
    out.edges.reserve(last_emitted_);
    wide_.seal();
    int n = upd_dfv(root, out, root_needs_, root_excl_ != 0, m, true, dfu, emit_shadow);
    holds_.expand(out, g_);
    last_emitted_ = out.vertices.size();
    if (n > 0) {
        out.starttime = m.at;
        out.expiration = m.at + m.duration;
        out.queue = m.queue;
    }
    return n > 0;
}

bool Traverser::replay(int64_t jobid, int64_t at, int64_t duration, bool reserve,
                       const std::map<int, std::pair<int64_t, bool>> &amounts, Emission &out,
                       std::string &why, const std::vector<int> *unplanned, bool as_policy) {
    // Mark the edges leading to every replayed vertex, then run the normal
    // update walk so aggregates, tags and order are maintained the same way.
    for (const auto &kv : amounts) settle_above(kv.first);
    tick();
    for (const auto &kv : amounts) {
        int v = kv.first;
        const Vertex &x = V(v);
        if (x.removed) {
            why = "vertex " + std::string(x.path) + " is not in the graph";
            return false;
        }
        if (kv.second.second) {
            if (!x.plans.fits_during(at, duration, kv.second.first)) {
                why = "vertex " + std::string(x.path) + " does not have " + std::to_string(kv.second.first) +
                      " free units for the replayed allocation";
                return false;
            }
        }
        int pe = x.parent_edge;
        if (pe >= 0) {
            E(pe).needs = static_cast<uint64_t>(kv.second.first);
            E(pe).exclusive = kv.second.second ? 1 : 0;
            stamp(pe);
        }
        for (int p = g_.parent(v); p >= 0; p = g_.parent(p)) {
            int ppe = V(p).parent_edge;
            if (ppe < 0 || E(ppe).seq == seq_) break;
            E(ppe).needs = static_cast<uint64_t>(V(p).size);
            E(ppe).exclusive = 0;
            stamp(ppe);
        }
    }
    root_needs_ = 1;
    root_excl_ = 0;
    if (auto it = amounts.find(g_.root); it != amounts.end()) {
        root_needs_ = static_cast<uint64_t>(it->second.first);
        root_excl_ = it->second.second;
    }
    root_seq_ = seq_;
    JobMeta m;
    m.jobid = jobid;
    m.at = at;
    m.now = 0;
    m.duration = duration;
    m.alloc_type = reserve ? AllocType::AllocOrReserve : AllocType::Alloc;
    const bool whole_nodes = as_policy && policy_.node_exclusive;
    std::set<int> saved_x = x_types_;
    if (whole_nodes) x_types_.insert(g_.types.node);
    bool walked = update(g_.root, out, m);
    x_types_ = std::move(saved_x);
    if (!walked) {
        why = "nothing of the replayed allocation is in this graph";
        return false;
    }
    // The walk gave every exclusive vertex a span of its own; take back
    // those of the unplanned ones (they keep their tag and exclusivity span).
    auto take_back = [&](int v) {
        Vertex &x = V(v);
        auto &held = reserve ? x.reservations : x.allocations;
        if (auto it = held.find(jobid); it != held.end()) {
            x.plans.rem_span(it->second);
            held.erase(it);
            touch(v);
        }
    };
    if (unplanned)
        for (int v : *unplanned) take_back(v);
    // Whole nodes: flux-sched's reader plans only what R holds exclusively
    // before the walk, which then plans nothing.
    if (whole_nodes)
        for (const EmittedVertex &ev : out.vertices) {
            auto it = amounts.find(ev.vertex);
            if (ev.exclusive && (it == amounts.end() || !it->second.second)) take_back(ev.vertex);
        }
    return true;
}

}  // namespace fluxion
