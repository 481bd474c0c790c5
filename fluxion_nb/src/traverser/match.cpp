// The match walk: test and prune each vertex, gather candidates bottom-up,
// let the policy choose (update.cpp then records the choice).
#include "traverser/traverser.hpp"

#include <algorithm>
#include <climits>
#include <cmath>

#include "util/errors.hpp"

namespace fluxion {

MatchOp match_op(std::string_view name) {
    if (name == "allocate") return MatchOp::Allocate;
    if (name == "allocate_orelse_reserve") return MatchOp::AllocateOrElseReserve;
    if (name == "allocate_with_satisfiability") return MatchOp::AllocateWithSatisfiability;
    if (name == "satisfiability") return MatchOp::Satisfiability;
    if (name == "without_allocating") return MatchOp::WithoutAllocating;
    if (name == "without_allocating_future") return MatchOp::WithoutAllocatingFuture;
    throw InputError("unknown match operation '" + std::string(name) + "'");
}

namespace {
constexpr int kAnyType = -1;

// Compare candidates' scores.
struct Greater {
    bool operator()(int64_t a, int64_t b) const { return a > b; }
};
struct Less {
    bool operator()(int64_t a, int64_t b) const { return a < b; }
};
// The locality policy's order of the top-level candidates: scores fall into
// runs of consecutive integers (the joined intervals of flux-sched's
// fold::interval_greater), and the run that starts highest comes first;
// scores of one run are equal to the sort.
struct RunGreater {
    // Sorted, distinct scores, each with the first score of its run.
    const std::vector<std::pair<int64_t, int64_t>> *runs;
    int64_t start(int64_t s) const {
        auto it = std::lower_bound(runs->begin(), runs->end(), std::make_pair(s, INT64_MIN));
        return it->second;
    }
    bool operator()(int64_t a, int64_t b) const { return start(a) > start(b); }
};

// Granule-aware progress toward a number of per-slot shares of one type.
struct ShareTally {
    unsigned per_share = 0;
    unsigned prev_total = 0;
    unsigned accum = 0;
    unsigned shares = 0;
    bool satisfies(unsigned multiplier) const { return per_share == 0 || shares >= multiplier; }
    void add(unsigned count) {
        accum += count;
        if (per_share > 0 && accum >= per_share) {
            shares++;
            accum = 0;
        }
    }
};
struct TypeTally {
    int type;
    ShareTally tally;
};
}  // namespace

Traverser::Traverser(Graph &g, Policy p, const std::string &prune_spec) : g_(g), policy_(std::move(p)) {
    std::string spec = prune_spec;
    size_t pos = 0;
    while (!spec.empty()) {
        size_t c = spec.find(',', pos);
        std::string pair = spec.substr(0, c);
        spec = c == std::string::npos ? "" : spec.substr(c + 1);
        pair.erase(std::remove_if(pair.begin(), pair.end(), ::isspace), pair.end());
        if (pair.empty()) continue;
        size_t colon = pair.find(':');
        if (colon == std::string::npos || colon == 0 || colon + 1 == pair.size())
            throw InputError("prune filter '" + pair + "': expected HIGH:LOW, e.g. ALL:core");
        std::string hl = pair.substr(0, colon), ll = pair.substr(colon + 1);
        int anchor = hl == "ALL" ? kAnyType : g_.types.intern(hl);
        set_pruning_type(anchor, g_.types.intern(ll));
    }
}

void Traverser::set_pruning_type(int anchor, int t) {
    if (anchor == kAnyType) {
        for (auto &kv : prune_.by_anchor) kv.second.erase(t);
        prune_.by_anchor[kAnyType].insert(t);
    } else {
        auto any = prune_.by_anchor.find(kAnyType);
        if (any == prune_.by_anchor.end() || !any->second.count(t)) prune_.by_anchor[anchor].insert(t);
    }
    prune_.all.insert(t);
    if (static_cast<size_t>(t) >= pruning_by_type_.size()) pruning_by_type_.resize(static_cast<size_t>(t) + 1, 0);
    pruning_by_type_[static_cast<size_t>(t)] = 1;
}

std::vector<int> Traverser::my_pruning_types(int anchor) const {
    std::vector<int> out;
    auto it = prune_.by_anchor.find(anchor);
    if (it != prune_.by_anchor.end())
        for (int t : it->second) out.push_back(t);
    auto any = prune_.by_anchor.find(kAnyType);
    if (anchor != kAnyType && any != prune_.by_anchor.end())
        for (int t : any->second)
            if (t != anchor) out.push_back(t);
    return out;
}

const std::vector<int64_t> &Traverser::relevant_counts(const PlannerMulti &p, const TypeCounts &m) {
    counts_.resize(p.size());
    for (size_t i = 0; i < p.size(); ++i) counts_[i] = m.amount(p.type_at(i));
    return counts_;
}

void Traverser::prime_filter(int u, TypeCounts &to_parent) {
    Vertex &x = V(u);
    mark(u);
    accum_if(x.type, x.size, to_parent);
    // A leaf has no out-edges in any subsystem (as flux-sched counts them).
    if (x.out_edges.empty() && !x.foreign_children) {
        if (!is_pruning_type(x.type)) {
            set_pruning_type(g_.types.cluster, x.type);
            accum_if(x.type, x.size, to_parent);
        }
        return;
    }
    TypeCounts dfv;
    for (int e : x.out_edges) {
        int t = E(e).target;
        if (visited(t)) continue;
        prime_filter(t, dfv);
    }
    for (auto &kv : dfv) accum_if(kv.first, kv.second, to_parent);
    std::vector<int> types = my_pruning_types(V(u).type);
    if (types.empty()) return;
    std::vector<int64_t> avail;
    for (int t : types) {
        auto it = dfv.find(t);
        avail.push_back(it == dfv.end() ? 0 : it->second);
    }
    Vertex &y = V(u);
    if (y.subplan && y.subplan->size() == types.size()) {
        y.subplan->update_totals(avail);
    } else {
        y.subplan = std::make_unique<PlannerMulti>(g_.start(), g_.plan_duration(), avail, types);
    }
    // The other pruning types (leaf types promoted at the root) are kept as
    // hidden aggregates here: they let a search skip subtrees without them.
    std::vector<int> hidden;
    std::vector<int64_t> hidden_totals;
    for (int t : prune_.all) {
        if (std::find(types.begin(), types.end(), t) != types.end()) continue;
        auto it = dfv.find(t);
        hidden.push_back(t);
        hidden_totals.push_back(it == dfv.end() ? 0 : it->second);
    }
    y.subplan->set_hidden(hidden, hidden_totals);
}

void Traverser::initialize() {
    settle();
    // The shortcuts reason about trees: a vertex with several parents (shared
    // storage) is counted and visited under whichever comes first.
    shared_ = g_.has_shared_children();
    holds_.order().invalidate();
    if (holds_.enabled()) holds_.order().build(g_, shared_);  // off the match's clock
    memos_.resize(g_, shared_);
    ++epoch_;
    if (g_.root < 0) return;
    TypeCounts from;
    prime_filter(g_.root, from);
}

void Traverser::prime_jobspec(std::vector<Resource> &resources, TypeCounts &to_parent) {
    if (flexible()) return flex_prime_jobspec(resources, to_parent);
    for (auto &r : resources) {
        if (r.exclusive == Tristate::True) x_types_.insert(r.type);
        accum_if(r.type, r.count.min, to_parent);
        r.user_data.clear();
        prime_jobspec(r.with, r.user_data);
        for (auto &kv : r.user_data)
            accum_if(kv.first, static_cast<int64_t>(r.count.min) * kv.second, to_parent);
    }
}

unsigned Traverser::calc_count(const Resource &r, unsigned qc) const {
    if (r.count.min > r.count.max || r.count.min > qc) return 0;
    unsigned count = 0;
    unsigned cur = r.count.min;
    switch (r.count.oper) {
        case '+': {
            count = qc < r.count.max ? qc : r.count.max;
            unsigned range = count - cur;
            count -= range % r.count.operand;
            break;
        }
        case '*':
            if (r.count.operand == 1) {
                count = cur;
            } else {
                while (cur <= qc && cur <= r.count.max) {
                    count = cur;
                    cur *= r.count.operand;
                }
            }
            break;
        case '^':
            if (r.count.operand < 2 || cur == 1) {
                count = cur;
            } else {
                while (cur <= qc && cur <= r.count.max) {
                    unsigned base = cur;
                    count = cur;
                    for (unsigned i = 1; i < r.count.operand; i++) cur *= base;
                }
            }
            break;
        default:
            break;
    }
    return count;
}

template <class F>
void Traverser::with_cmp(F &&f) {
    if (policy_.high)
        f(Greater{});
    else
        f(Less{});
}

// ---------------------------------------------------------------- select

bool Traverser::exclusivity(const std::vector<Resource> &rs, int u) {
    bool x = false;
    for (const auto &r : rs)
        if (r.type == type_of(u) && r.exclusive == Tristate::True) x = true;
    return x;
}

int64_t Traverser::avail_of(const JobMeta &m, int u) const {
    const Vertex &x = g_.vertices[static_cast<size_t>(u)];
    // "Could it ever fit" must not depend on what is held now, nor on a hold
    // that runs to the end of the graph (a duration-0 job does).
    if (m.alloc_type == AllocType::Satisfiability) return x.plans.total();
    return x.plans.avail_during(m.at, m.duration);
}

int64_t Traverser::sat_time(int64_t duration) const {
    // Fluxion probes the last window of the root's plan, which ends at INT64_MAX:
    // past every job, all of which end by the graph's end.
    return g_.start() + g_.plan_duration() - duration - 1;
}

bool Traverser::by_excl(const JobMeta &m, int u, bool exclusive_in, const Resource &r) {
    if (exclusive_in && r.exclusive == Tristate::False) {
        errno_ = MatchErr::Invalid;
        err_msg_ += "by_excl: exclusivity conflicts at jobspec=" + r.label + " : vertex=" + std::string(V(u).name);
        return false;
    }
    // On an empty graph every vertex can be had exclusively.
    if (m.alloc_type == AllocType::Satisfiability) return true;
    if (exclusive_in || r.exclusive == Tristate::True) {
        // A partial pool is shared unit by unit: only an explicit exclusive
        // request needs it untouched.
        if (V(u).partial_pool && r.exclusive != Tristate::True) return true;
        if (m.at == m.now && (m.alloc_type == AllocType::Alloc || m.alloc_type == AllocType::NoAlloc) &&
            !V(u).allocations.empty()) {
            errno_ = MatchErr::Busy;
            return false;
        }
        int64_t njobs = V(u).x_checker.avail_during(m.at, m.duration);
        if (njobs == -1) {
            errno_ = MatchErr::Range;
            return false;
        }
        if (njobs < kXCheckerJobs) {
            errno_ = MatchErr::Busy;
            return false;
        }
    }
    return true;
}

bool Traverser::by_subplan(const JobMeta &m, int u, const Resource &r) {
    Vertex &x = V(u);
    if (!x.subplan) return true;
    if (r.user_data.empty()) return true;
    for (size_t i = 0; i < x.subplan->size(); ++i) {
        const Planner &p = x.subplan->at(i);
        int64_t agg = r.user_data.amount(x.subplan->type_at(i));
        if (agg > p.total()) {
            errno_ = MatchErr::Range;
            return false;
        }
        if (m.alloc_type == AllocType::Satisfiability) continue;  // totals only
        if (!p.fits_during(m.at, m.duration, agg)) {
            errno_ = MatchErr::Busy;
            return false;
        }
    }
    if (!hidden_.active()) return true;
    MatchErr hidden = HiddenAggregates::check(m, *x.subplan, r.user_data);
    if (hidden == MatchErr::None) return true;
    errno_ = hidden;
    return false;
}

bool Traverser::prune(const JobMeta &m, bool excl, int u, const std::vector<Resource> &rs) {
    Vertex &x = V(u);
    if (m.alloc_type != AllocType::Satisfiability && x.status != Status::Up) {
        errno_ = MatchErr::Busy;
        return false;
    }
    if (m.constraint && (x.type == g_.types.node || x.type == g_.types.storage_node) &&
        !m.constraint->match(x)) {
        errno_ = MatchErr::Busy;
        return false;
    }
    int64_t avail = avail_of(m, u);
    if (avail == 0) {
        errno_ = MatchErr::Busy;
        return false;
    }
    if (avail == -1) {
        errno_ = MatchErr::Invalid;
        err_msg_ += "by_avail: planner_avail_resources_during returned -1.\nInvalid argument.\n";
        return false;
    }
    if (flexible()) {
        if (flex_prune_resources(m, excl, u, rs)) return true;
        if (errno_ == MatchErr::Range) errno_ = MatchErr::Busy;
        return false;
    }
    for (const auto &r : rs) {
        if (x.type != r.type && r.type != g_.types.slot) continue;
        if (r.type != g_.types.slot && !by_excl(m, u, excl, r)) {
            if (errno_ == MatchErr::Range) errno_ = MatchErr::Busy;
            return false;
        }
        if (!by_subplan(m, u, r)) {
            if (errno_ == MatchErr::Range) errno_ = MatchErr::Busy;
            return false;
        }
    }
    return true;
}

const std::vector<Resource> &Traverser::test(int u, const std::vector<Resource> &rs, bool &pristine,
                                             unsigned &nslots, MatchKind &kind) {
    if (flexible()) return flex_test(u, rs, pristine, nslots, kind);
    const Resource *slot = nullptr;
    const Resource *match = nullptr;
    bool matched = false;
    int t = type_of(u);
    for (const auto &r : rs) {
        if (t == r.type) {
            if (matched) {
                err_msg_ += "test: siblings in jobspec request same resource type : " +
                            g_.types.name(t) + ".\n";
                kind = MatchKind::None;
                return rs;
            }
            match = &r;
            for (const auto &c : r.with)
                if (c.type == g_.types.slot) {
                    slot = &c;
                    nslots = effective_max(c);
                }
            matched = true;
        } else if (r.type == g_.types.slot) {
            if (matched) {
                err_msg_ += "test: siblings in jobspec request same resource type : " +
                            g_.types.name(t) + ".\n";
                kind = MatchKind::None;
                return rs;
            }
            slot = &r;
            nslots = effective_max(r);
            matched = true;
        }
    }
    bool slot_ok = slot != nullptr;
    if (slot) {
        for (const auto &c : slot->with) {
            bool found = false;
            for (int e : V(u).out_edges)
                if (type_of(E(e).target) == c.type) {
                    found = true;
                    break;
                }
            if (!found) {
                slot_ok = false;
                break;
            }
        }
    }
    if (slot_ok) {
        kind = MatchKind::Slot;
        pristine = false;
        return slot->with;
    }
    if (match) {
        kind = MatchKind::Resource;
        pristine = false;
        return match->with;
    }
    kind = pristine ? MatchKind::PristineNone : MatchKind::None;
    return rs;
}

bool Traverser::discover_vtx(int u) {
    if (policy_.node_centric && type_of(u) == g_.types.node) {
        const Vertex &x = V(u);
        if (x.id < -1) return false;
        int64_t base = x.id + 1;
        int64_t add = base + 1;
        int64_t mul = add * 10000;
        int64_t tie = std::llabs(x.uniq_id % 10000 - 1);
        node_factor_ = mul + tie;
        multilevel_scores_ += node_factor_;
    }
    return true;
}

bool Traverser::finish_vtx(int u, const std::vector<Resource> &rs, Scoring &dfu) {
    int64_t score = kMatchMet;
    int t = type_of(u);
    for (const auto &r : rs) {
        if (r.type != t) continue;
        for (const auto &c : r.with) {
            unsigned qc = dfu.qualified_count(c.type);
            unsigned count = calc_count(c, qc);
            if (count == 0) {
                score = kMatchUnmet;
                break;
            }
            with_cmp([&](auto cmp) { dfu.choose_accum_best_k(c.type, count, cmp); });
        }
    }
    if (policy_.node_centric && t == g_.types.node) multilevel_scores_ -= node_factor_;
    int64_t own = policy_.perf_class ? perf_class_of(V(u).properties.get()) : multilevel_scores_ + V(u).id + 1;
    dfu.overall_score = score == kMatchMet ? score + own : score;
    if (score != kMatchMet) {
        errno_ = MatchErr::Busy;
        return false;
    }
    return true;
}

void Traverser::finish_slot(Scoring &dfu) {
    for (auto &kv : dfu.all()) {
        int type = kv.first;
        if (policy_.perf_class)  // variation bundles slots best score first
            dfu.choose_accum_all(type, Greater{});
        else
            with_cmp([&](auto cmp) { dfu.choose_accum_all(type, cmp); });
    }
}

bool Traverser::finish_graph(const std::vector<Resource> &rs, Scoring &dfu) {
    int64_t score = kMatchMet;
    std::vector<std::pair<int64_t, int64_t>> runs;
    for (const auto &r : rs) {
        unsigned qc = dfu.qualified_count(r.type);
        unsigned count = calc_count(r, qc);
        if (count == 0) {
            score = kMatchUnmet;
            break;
        }
        if (policy_.locality) {
            runs.clear();
            for (const EdgeGroup &g : dfu.of(r.type).groups()) runs.emplace_back(g.score, g.score);
            std::sort(runs.begin(), runs.end());
            runs.erase(std::unique(runs.begin(), runs.end()), runs.end());
            for (size_t i = 1; i < runs.size(); ++i)
                if (runs[i].first == runs[i - 1].first + 1) runs[i].second = runs[i - 1].second;
            dfu.choose_accum_best_k(r.type, count, RunGreater{&runs});
            continue;
        }
        with_cmp([&](auto cmp) { dfu.choose_accum_best_k(r.type, count, cmp); });
    }
    dfu.overall_score = score;
    multilevel_scores_ = 0;
    return score == kMatchMet;
}

// The child at the end of `e` just explored, as one candidate of its type:
// what its walk left in `dfu` (free units, score) and its exclusivity.
void Traverser::add_candidate(int e, bool exclusive, Scoring &dfu) {
    unsigned count = dfu.avail;
    EdgeGroup g;
    g.score = dfu.overall_score;
    g.count = count;
    g.exclusive = exclusive;
    g.edges.push_back(EvalEdge{count, count, static_cast<unsigned>(exclusive), e});
    dfu.add(type_of(E(e).target), std::move(g));
}

int Traverser::explore(const JobMeta &m, int u, const std::vector<Resource> &rs, bool pristine,
                       bool *excl, Scoring &dfu, unsigned multiplier) {
    if (V(u).deferred) materialize(u);
    int rc2 = -1;
    if (!policy_.stop_on_1) {
        for (int e : V(u).out_edges) {
            int tgt = E(e).target;
            if (visited(tgt)) continue;
            bool x_inout = *excl;
            if (dom_dfv(m, tgt, rs, pristine, &x_inout, dfu) == 0) {
                add_candidate(e, x_inout, dfu);
                rc2 = 0;
            }
        }
        return rc2;
    }
    // A type or two per request: flat lists, no allocation per visit.
    SmallVec<int, 4> sat_types;
    SmallVec<TypeTally, 4> tallies;
    auto tally_of = [&tallies](int type) -> ShareTally & {
        for (TypeTally &t : tallies)
            if (t.type == type) return t.tally;
        tallies.push_back(TypeTally{type, {}});
        return tallies.back().tally;
    };
    auto satisfied = [&sat_types](int type) {
        return std::find(sat_types.begin(), sat_types.end(), type) != sat_types.end();
    };
    for (const auto &r : rs) tally_of(r.type).per_share = effective_max(r);
    // Iterate over a copy: a weight update cannot happen during select, but
    // the order must be the one in force when the walk starts.
    SmallVec<int, 64> order;
    const std::vector<int> &now = V(u).by_outedges;
    order.assign(now.data(), now.data() + now.size());
    // Below the pristine levels, test() turns a child away at once when no
    // request names its type and none is a slot: count the visit as the walk
    // would (the visit counts are reported) and spare the call.
    const bool turned_away_early =
        !pristine && !flexible() &&
        std::none_of(rs.begin(), rs.end(), [this](const Resource &r) { return r.type == g_.types.slot; });
    auto requested = [&rs](int type) {
        return std::any_of(rs.begin(), rs.end(), [type](const Resource &r) { return r.type == type; });
    };
    for (int e : order) {
        int tgt = E(e).target;
        if (visited(tgt)) continue;
        if (satisfied(type_of(tgt))) continue;
        if (turned_away_early && !requested(type_of(tgt))) {
            preorder_++;
            errno_ = MatchErr::Busy;
            continue;
        }
        bool x_inout = *excl;
        if (dom_dfv(m, tgt, rs, pristine, &x_inout, dfu) == 0) {
            add_candidate(e, x_inout, dfu);
            for (TypeTally &tt : tallies) {
                ShareTally &t = tt.tally;
                unsigned total = dfu.total_count(tt.type);
                if (total <= t.prev_total) continue;
                unsigned delta = total - t.prev_total;
                t.prev_total = total;
                if (t.per_share > 0 && partial_share_type(tt.type)) {
                    // Partial pools split across shares: count whole shares of units.
                    t.accum += delta;
                    t.shares = t.accum / t.per_share;
                } else {
                    t.add(delta);
                }
            }
            for (const auto &r : rs)
                if (tally_of(r.type).satisfies(multiplier) && !satisfied(r.type)) sat_types.push_back(r.type);
            rc2 = 0;
            bool enough = std::all_of(rs.begin(), rs.end(), [&](const Resource &r) {
                return tally_of(r.type).satisfies(multiplier);
            });
            if (enough) break;
        }
    }
    return rc2;
}

bool Traverser::partial_share_type(int type) const {
    const auto &pp = g_.options().partial_pool_types;
    if (pp.empty()) return false;  // the common case, without string lookups
    // Asked per candidate and resource: answer from a per-type table, filled once
    // per type (types only ever get added, and the options never change).
    auto t = static_cast<size_t>(type);
    if (t >= partial_type_.size()) partial_type_.resize(t + 1, -1);
    if (partial_type_[t] < 0) partial_type_[t] = pp.count("*") > 0 || pp.count(g_.types.name(type)) > 0;
    return partial_type_[t] != 0;
}

unsigned Traverser::cnt_slot(const std::vector<Resource> &shape, Scoring &dfu_slot) {
    unsigned qual_num_slots = UINT_MAX;
    for (const auto &elem : shape) {
        unsigned qc = dfu_slot.qualified_count(elem.type);
        unsigned count = calc_count(elem, qc);
        Evals &ev = dfu_slot.of(elem.type);
        unsigned fit = 0;
        if (count != 0) {
            if (partial_share_type(elem.type)) {
                uint64_t units = 0;
                for (const auto &g : ev.groups()) units += g.edges[0].count;
                fit = static_cast<unsigned>(units / count);
            } else {
                ShareTally tally;
                tally.per_share = count;
                while (EdgeGroup *g = ev.iter_next()) tally.add(g->edges[0].count);
                fit = tally.shares;
            }
        }
        qual_num_slots = std::min(qual_num_slots, fit);
        ev.iter_reset();
    }
    return qual_num_slots;
}

bool Traverser::cut_slot(const std::vector<Resource> &shape, Scoring &dfu_slot, SlotCursor &cursor,
                         EdgeGroup &slot) {
    int64_t score = kMatchMet;
    for (const auto &elem : shape) {
        unsigned j = 0;
        unsigned count = calc_count(elem, dfu_slot.qualified_count(elem.type));
        Evals &ev = dfu_slot.of(elem.type);
        bool partial = partial_share_type(elem.type);
        while (j < count) {
            if (partial) {
                auto &cur = cursor[elem.type];
                if (cur.second == 0) {
                    cur.first = ev.iter_next();
                    if (!cur.first) {
                        err_msg_ += "dom_slot: not enough slots.\n";
                        return false;
                    }
                    cur.second = cur.first->edges[0].count;
                    if (cur.second == 0) continue;
                }
                unsigned take = std::min(count - j, cur.second);
                slot.edges.push_back(EvalEdge{take, take, 1, cur.first->edges[0].edge});
                score += cur.first->score;
                cur.second -= take;
                j += take;
                continue;
            }
            EdgeGroup *g = ev.iter_next();
            if (!g) {
                err_msg_ += "dom_slot: not enough slots.\n";
                return false;
            }
            unsigned c = g->edges[0].count;
            slot.edges.push_back(EvalEdge{c, c, 1, g->edges[0].edge});
            score += g->score;
            j += c;
        }
    }
    slot.score = score;
    slot.count = 1;
    slot.exclusive = 1;
    return true;
}

int Traverser::dom_slot(const JobMeta &m, int u, const std::vector<Resource> &shape, unsigned nslots,
                        bool pristine, Scoring &dfu) {
    bool x_inout = true;
    ScoringPool::Lease slot_lease(scoring_pool_);
    Scoring &dfu_slot = *slot_lease;
    unsigned qual = 0;
    std::vector<EdgeGroup> slots;
    if (explore(m, u, shape, pristine, &x_inout, dfu_slot, nslots) != 0) return -1;
    finish_slot(dfu_slot);
    qual = cnt_slot(shape, dfu_slot);
    // With a shared pool a tiny slot fits thousands of times; the parent takes at most
    // nslots of them, and the slots are cut best first, so cut no more than it can take.
    // (Whole-vertex shapes keep flux-sched's full list: their tie order is observable.)
    if (qual > nslots && nslots > 0 &&
        std::any_of(shape.begin(), shape.end(), [&](const Resource &r) { return partial_share_type(r.type); }))
        qual = nslots;
    SlotCursor cursor;
    for (unsigned i = 0; i < qual; ++i) {
        EdgeGroup slot;
        if (!cut_slot(shape, dfu_slot, cursor, slot)) return -1;
        slots.push_back(std::move(slot));
    }
    for (auto &s : slots) dfu.add(g_.types.slot, std::move(s));
    return qual ? 0 : -1;
}

int Traverser::dom_dfv(const JobMeta &m, int u, const std::vector<Resource> &rs, bool pristine,
                       bool *excl, Scoring &to_parent) {
    if (memo_active() && memos_.worth(u))
        return dom_dfv_memo(m, u, rs, pristine, excl, to_parent);
    return dom_dfv_walk(m, u, rs, pristine, excl, to_parent, nullptr);
}

int Traverser::dom_dfv_walk(const JobMeta &m, int u, const std::vector<Resource> &rs, bool pristine,
                            bool *excl, Scoring &to_parent, SubtreeMemo *rec) {
    bool x_in = *excl || exclusivity(rs, u);
    bool x_inout = x_in;
    bool check_pres = pristine;
    unsigned nslots = 0;
    MatchKind kind = MatchKind::None;
    ScoringPool::Lease lease(scoring_pool_);
    Scoring &dfu = *lease;
    const std::vector<Resource> &next = test(u, rs, check_pres, nslots, kind);
    preorder_++;
    if (kind == MatchKind::None) {
        errno_ = MatchErr::Busy;
        return -1;
    }
    if (!prune(m, x_in, u, rs) || !discover_vtx(u)) return -1;
    mark(u);
    if (kind == MatchKind::Slot && flexible())
        flex_dom_slot(m, u, next, nslots, check_pres, dfu);
    else if (kind == MatchKind::Slot)
        dom_slot(m, u, next, nslots, check_pres, dfu);
    else
        explore(m, u, next, check_pres, &x_inout, dfu);
    *excl = x_in;
    int64_t avail = avail_of(m, u);
    if (avail == 0) {
        errno_ = MatchErr::Busy;
        return -1;
    }
    if (avail < 0) {
        errno_ = MatchErr::Invalid;
        return -1;
    }
    if (!finish_vtx(u, rs, dfu)) return -1;
    int64_t overall = dfu.overall_score;
    if (rec && overall > kMatchUnmet && !dfu.hier_constrain_now) {
        rec->merged = true;
        dfu.freeze();  // the memo and the parent share the groups
        rec->scoring = dfu;
    }
    if (resolve(dfu, to_parent) != 0) return -1;
    to_parent.avail = static_cast<unsigned>(avail);
    to_parent.overall_score = overall;
    postorder_++;
    return 0;
}

int Traverser::resolve(Scoring &dfu, Scoring &to_parent) {
    if (dfu.overall_score > kMatchUnmet) {
        if (dfu.hier_constrain_now)
            enforce(dfu, false);
        else
            to_parent.merge(std::move(dfu));
    }
    return 0;
}

void Traverser::enforce(Scoring &dfu, bool unconstrained) {
    for (auto &kv : dfu.all()) {
        Evals &ev = kv.second;
        if (!ev.best_k()) continue;
        for (unsigned i = 0; i < ev.best_i(); ++i) {
            const EdgeGroup &grp = ev.chosen(i);
            if (grp.root) continue;
            for (const auto &ee : grp.edges) {
                apply_stamp(EdgeStamp{ee.edge, ee.needs, ee.exclusive});
                if (!unconstrained) continue;
                int parent_v = E(ee.edge).source;
                while (V(parent_v).parent_edge >= 0) {
                    int pe = V(parent_v).parent_edge;
                    if (E(pe).seq == seq_) break;
                    int tgt = E(pe).target;
                    parent_v = E(pe).source;
                    bool constrained = true;
                    if (dfu.has(type_of(tgt)) && !dfu.of(type_of(tgt)).best_k()) constrained = false;
                    if (constrained) continue;
                    E(pe).needs = static_cast<uint64_t>(V(tgt).size);
                    E(pe).exclusive = 0;
                    stamp(pe);
                }
            }
        }
    }
}

bool Traverser::resolve_graph(int root, std::vector<Resource> &rs, Scoring &dfu, unsigned &needs) {
    if (!finish_graph(rs, dfu)) return false;
    needs = 1;
    for (const auto &r : rs) {
        if (r.type == type_of(root)) {
            unsigned count = calc_count(r, dfu.avail);
            if (count == 0) return false;
            needs = count;
        }
    }
    for (auto &kv : dfu.all())
        if (kv.second.qualified_count() == 0) return false;
    enforce(dfu, true);
    return true;
}

bool Traverser::select(std::vector<Resource> &rs, int root, JobMeta &m, bool excl) {
    if (flexible()) return flex_select(rs, root, m, excl);
    return select_tree(rs, root, m, excl);
}

bool Traverser::select_tree(std::vector<Resource> &rs, int root, JobMeta &m, bool excl) {
    ScoringPool::Lease lease(scoring_pool_);
    Scoring &dfu = *lease;
    bool x_in = excl;
    tick();
    preorder_ = 0;
    postorder_ = 0;
    multilevel_scores_ = 0;
    int rc = dom_dfv(m, root, rs, true, &x_in, dfu);
    if (rc != 0) return false;
    unsigned needs = 0;
    EdgeGroup g;
    g.score = dfu.overall_score;
    g.count = dfu.avail;
    g.exclusive = excl;
    g.root = true;
    g.edges.push_back(EvalEdge{dfu.avail, dfu.avail, static_cast<unsigned>(excl), -1});
    dfu.add(type_of(root), std::move(g));
    bool ok = resolve_graph(root, rs, dfu, needs);
    if (!ok) errno_ = MatchErr::Unsatisfiable;
    root_needs_ = needs;
    root_excl_ = x_in;
    root_seq_ = seq_;
    return ok;
}

bool Traverser::request_feasible(const JobMeta &m, MatchOp op, TypeCounts &dfv) {
    int64_t target_nodes = dfv[g_.types.node];
    bool checking_sat = op == MatchOp::AllocateWithSatisfiability || op == MatchOp::Satisfiability;
    bool alloc_like = !checking_sat;
    if (!m.constraint && target_nodes <= g_.nodes_up) return true;
    if (target_nodes > g_.nodes_up) {
        if (alloc_like) {
            errno_ = MatchErr::Busy;
            return false;
        }
        if (checking_sat) {
            errno_ = MatchErr::Unsatisfiable;
            return false;
        }
    }
    if (static_cast<size_t>(g_.types.node) >= g_.by_type.size()) return true;
    // Allocation asks about now; the other operations about the graph's last
    // second, from which the duration runs on past the end (plans do). A node
    // held to the end is busy there. Satisfiability only asks which nodes the
    // constraint admits, whatever they hold.
    int64_t target_time =
        (op == MatchOp::Allocate || op == MatchOp::WithoutAllocating) ? m.at : g_.end() - 1;
    int64_t feasible = 0;
    for (int v : g_.by_type[static_cast<size_t>(g_.types.node)]) {
        const Vertex &x = V(v);
        if (m.constraint && !m.constraint->match(x)) continue;
        if (checking_sat || (x.status == Status::Up && x.plans.avail_during(target_time, m.duration) == 1)) {
            if (++feasible >= target_nodes) break;
        }
    }
    if (feasible < target_nodes) {
        if (alloc_like) {
            errno_ = MatchErr::Busy;
            return false;
        }
        if (checking_sat) {
            errno_ = MatchErr::Unsatisfiable;
            return false;
        }
    }
    return true;
}

bool Traverser::schedule(Jobspec &js, JobMeta &m, bool x, MatchOp op, int root,
                         TypeCounts &dfv) {
    if (!request_feasible(m, op, dfv)) return false;
    if (select(js.resources, root, m, x)) return true;
    PlannerMulti *p = V(root).subplan.get();
    auto sat_check = [&]() {
        m.alloc_type = AllocType::Satisfiability;
        m.at = sat_time(m.duration);
        if (!select(js.resources, root, m, x)) {
            if (errno_ == MatchErr::Busy || errno_ == MatchErr::Range) errno_ = MatchErr::Unsatisfiable;
            ++epoch_;
        }
    };
    if (op == MatchOp::AllocateWithSatisfiability) {
        errno_ = MatchErr::Busy;
        sat_check();
        return false;
    }
    if (op == MatchOp::AllocateOrElseReserve || op == MatchOp::WithoutAllocatingFuture) {
        if (op == MatchOp::AllocateOrElseReserve) m.alloc_type = AllocType::AllocOrReserve;
        if (!p) {
            errno_ = MatchErr::Invalid;
            return false;
        }
        std::vector<int64_t> agg = relevant_counts(*p, dfv);
        bool ok = false;
        bool range = false;
        for (size_t i = 0; i < agg.size(); ++i)
            if (agg[i] > p->at(i).total()) range = true;
        int64_t t = range ? -1 : p->avail_time_first(m.at + 1, m.duration, agg);
        while (t != -1) {
            m.at = t;
            if (select(js.resources, root, m, x)) {
                ok = true;
                break;
            }
            t = p->avail_time_next();
        }
        if (ok) return true;
        // No schedulable point left: busy, or never satisfiable?
        errno_ = MatchErr::Busy;
        sat_check();
        return false;
    }
    errno_ = MatchErr::Busy;
    return false;
}

bool Traverser::run(Jobspec &js, MatchOp op, int64_t jobid, int64_t &at, Emission &out,
                    MatchErr &err) {
    err_msg_.clear();
    errno_ = MatchErr::None;
    err = MatchErr::None;
    memos_.set_request(js.serial);
    if (g_.root < 0 || js.resources.empty()) {
        err = MatchErr::Invalid;
        return false;
    }
    int root = g_.root;
    bool x = exclusivity(js.resources, root);
    std::set<int> saved_x = x_types_;
    if (policy_.node_exclusive) x_types_.insert(g_.types.node);
    TypeCounts dfv;
    prime_jobspec(js.resources, dfv);
    hidden_.begin(!shared_ && !flexible(), js.resources, g_.types.slot);
    JobMeta m;
    m.jobid = jobid;
    m.at = at;
    m.now = at;
    m.alloc_type = AllocType::Alloc;
    m.constraint = js.constraint.get();
    m.queue = js.queue;
    int64_t gdur = g_.duration();
    if (!(js.duration >= 0) || js.duration > static_cast<double>(gdur)) {
        x_types_ = saved_x;
        err = MatchErr::Invalid;
        err_msg_ += "jobspec duration is negative or longer than the resource graph's time span.\n";
        return false;
    }
    // No duration: the graph's whole span, from whenever it starts (cut to the
    // graph's end below, once the start is known).
    m.duration = js.duration == 0.0 ? gdur : static_cast<int64_t>(std::ceil(js.duration));
    if (op == MatchOp::WithoutAllocating || op == MatchOp::WithoutAllocatingFuture) m.alloc_type = AllocType::NoAlloc;
    bool ok;
    if (op == MatchOp::Satisfiability) {
        m.alloc_type = AllocType::Satisfiability;
        m.at = sat_time(m.duration);
        ok = select(js.resources, root, m, x);
        if (!ok && (errno_ == MatchErr::Busy || errno_ == MatchErr::Range))
            errno_ = MatchErr::Unsatisfiable;
        ++epoch_;
    } else {
        ok = schedule(js, m, x, op, root, dfv);
        if (ok) {
            at = m.at;
            if (at == g_.end()) {
                x_types_ = saved_x;
                err = MatchErr::Busy;
                return false;
            }
            if (at < 0 || at > g_.end()) {  // free only from after the end
                x_types_ = saved_x;
                err = MatchErr::Invalid;
                return false;
            }
            if (at + m.duration > g_.end()) m.duration = g_.end() - at;
            ok = update(root, out, m);
            if (!ok) errno_ = MatchErr::Invalid;
        }
    }
    x_types_ = saved_x;
    err = ok ? MatchErr::None : errno_;
    if (!ok && err == MatchErr::None) err = MatchErr::Busy;
    return ok;
}

}  // namespace fluxion
