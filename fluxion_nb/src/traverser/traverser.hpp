// Depth-first-and-up matching over the containment tree, with the same
// choices flux-sched's DFU traverser makes: test and prune each vertex,
// gather candidates bottom-up, let the policy choose, then walk the chosen
// edges once more to record the allocation and emit it.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "graph/graph.hpp"
#include "jobspec/jobspec.hpp"
#include "policies/policy.hpp"
#include "traverser/deferred_holds.hpp"
#include "traverser/hidden_aggregates.hpp"
#include "traverser/job.hpp"
#include "traverser/scoring.hpp"
#include "traverser/subtree_memo.hpp"
#include "traverser/wide_edges.hpp"

namespace fluxion {

struct EmittedVertex {
    // Left unset by default: the entries of nodes emitted whole are written
    // into room made for all of them at once.
    EmittedVertex() {}
    EmittedVertex(int v, int64_t n, bool x, int l) : vertex(v), level(l), exclusive(x), needs(n) {}
    int vertex;
    int level : 31;  // depth below the root, for the text writers
    bool exclusive : 1;
    int64_t needs;
};
// Sixteen bytes: a match of many whole nodes emits thousands of entries, all
// of them fresh memory for the first such match.
static_assert(sizeof(EmittedVertex) == 16);

// What one successful match walk emitted, in emission (post-) order.
struct Emission {
    std::vector<EmittedVertex> vertices;
    std::vector<int> edges;
    int64_t starttime = 0;
    int64_t expiration = 0;
    std::string queue;
    // Aggregate filter usage per vertex ("type" -> "used:N, total:M"), only
    // filled by find with agfilter.
    std::map<int, std::map<std::string, std::string>> agfilter;
};

struct PruneSpec {
    // anchor type (-1 = any) -> pruned types, kept sorted by type order
    std::map<int, std::set<int>> by_anchor;
    std::set<int> all;
};

class Traverser {
   public:
    Traverser(Graph &g, Policy p, const std::string &prune_spec);

    const Policy &policy() const { return policy_; }
    void set_policy(Policy p) {
        policy_ = std::move(p);
        memos_.invalidate();
    }
    TraverserKind kind() const { return kind_; }
    void set_kind(TraverserKind k) {
        kind_ = k;
        memos_.invalidate();
    }

    // Build the subtree aggregate filters (after load or any graph change).
    void initialize();

    // Match a jobspec; on success records it (unless NoAlloc / satisfiability)
    // and fills `out`. `at` is the start time (0 = now) on return.
    // `js` must stay the same object for as long as it is asked again: the
    // subtree memos know a request by its address and serial.
    bool run(Jobspec &js, MatchOp op, int64_t jobid, int64_t &at, Emission &out,
             MatchErr &err);

    // Remove every trace of `jobid` (allocation or reservation).
    // `listed`: the vertices the job's emission named (children before parents).
    // With the shortcuts on and a tree, cancel visits only those instead of
    // every child of every tagged vertex; it releases the same vertices in the
    // same order and counts the same visits.
    bool cancel(int64_t jobid, const std::vector<int> *listed = nullptr);
    // Release the part of `jobid` held by the vertices `listed` (their whole
    // amounts), fixing aggregates on ancestors. Returns true when nothing of
    // the job is left.
    bool partial_cancel(int64_t jobid, const std::vector<int> &listed, bool &full);
    // Replay an allocation: vertex -> (amount, exclusive) for the given job.
    // `unplanned`: vertices among them held exclusively (tagged, emitted as
    // exclusive) whose own planner nonetheless takes no span. `as_policy`:
    // walk as flux-sched's update does under a node-exclusive policy, each
    // node reached taken whole (tagged, counted, emitted) while only what R
    // holds exclusively takes planner spans.
    bool replay(int64_t jobid, int64_t at, int64_t duration, bool reserve,
                const std::map<int, std::pair<int64_t, bool>> &amounts, Emission &out,
                std::string &why, const std::vector<int> *unplanned = nullptr, bool as_policy = false);

    // Apply every deferred node-wide bookkeeping (see deferred_holds.cpp);
    // needed before reading vertices' scheduling state directly.
    void settle();
    // See MatcherOptions::shortcuts.
    void set_shortcuts(bool on, bool memos = true) {
        settle();
        holds_.set_enabled(on);
        hidden_.set_enabled(on);
        wide_.set_enabled(on);
        memos_.set_enabled(on && memos);
        memos_.invalidate();
    }
    // Forget every subtree memo: for changes made to vertices directly
    // (status, properties) rather than through the traverser.
    void invalidate_memos() { memos_.invalidate(); }

    // Subtree walks answered from a memo (see subtree_memo.hpp).
    uint64_t memo_hits() const { return memos_.hits(); }
    unsigned preorder_count() const { return preorder_; }
    unsigned postorder_count() const { return postorder_; }
    const std::string &err_message() const { return err_msg_; }
    void clear_err_message() { err_msg_.clear(); }

   private:
    enum class MatchKind { None, PristineNone, Slot, Resource };

    Graph &g_;
    Policy policy_;
    TraverserKind kind_ = TraverserKind::Simple;
    PruneSpec prune_;
    std::set<int> x_types_;  // types allocated whole for this match
    uint64_t seq_ = 0;
    uint64_t epoch_ = 1;
    int64_t multilevel_scores_ = 0;
    int64_t node_factor_ = 0;
    unsigned preorder_ = 0, postorder_ = 0;
    int level_ = 0;
    size_t last_emitted_ = 0;  // vertices the last update emitted
    MatchErr errno_ = MatchErr::None;
    std::string err_msg_;
    // Root pseudo-edge marks.
    uint64_t root_needs_ = 0;
    int root_excl_ = 0;
    uint64_t root_seq_ = 0;

    Vertex &V(int v) { return g_.vertices[static_cast<size_t>(v)]; }
    Edge &E(int e) { return g_.edges[static_cast<size_t>(e)]; }
    int type_of(int v) { return V(v).type; }

    void tick() {
        ++seq_;
        ++epoch_;
        wide_.reset();
    }
    // The speed-ups, each an object of its own (see their headers).
    WideEdgeLists wide_;
    HiddenAggregates hidden_;
    DeferredHolds holds_;
    SubtreeMemos memos_;
    // Choosing an edge for the update walk.
    void stamp(int e) {
        Edge &ed = E(e);
        ed.seq = seq_;
        if (wide_.listing()) wide_.note(ed.source, e, V(ed.source).out_edges.size());
    }
    bool visited(int v) { return V(v).color_epoch == epoch_; }
    void mark(int v) { V(v).color_epoch = epoch_; }

    // Asked for every vertex a walk passes: an array lookup, not a set's.
    bool is_pruning_type(int t) const {
        return t >= 0 && static_cast<size_t>(t) < pruning_by_type_.size() && pruning_by_type_[static_cast<size_t>(t)];
    }
    std::vector<char> pruning_by_type_;  // prune_.all by type id
    bool partial_share_type(int type) const;
    // Per partial-pool type: the candidate being cut into slots and what is left of it.
    using SlotCursor = std::map<int, std::pair<EdgeGroup *, unsigned>>;
    // Cut one slot of `shape` out of the candidates explored below a slot
    // vertex; false (with a message) when they run out.
    bool cut_slot(const std::vector<Resource> &shape, Scoring &dfu_slot, SlotCursor &cursor, EdgeGroup &slot);
    mutable std::vector<signed char> partial_type_;  // per type id: -1 not asked yet, 0, 1
    void set_pruning_type(int anchor, int t);
    std::vector<int> my_pruning_types(int anchor) const;
    void accum_if(int type, int64_t count, TypeCounts &acc) const {
        if (is_pruning_type(type)) acc[type] += count;
    }
    void prime_filter(int u, TypeCounts &to_parent);
    void prime_jobspec(std::vector<Resource> &resources, TypeCounts &to_parent);
    // A request's amount of each of a subtree aggregate's types (0 when not
    // asked), in the aggregate's order. The result is scratch space, valid
    // until the next call.
    const std::vector<int64_t> &relevant_counts(const PlannerMulti &p, const TypeCounts &m);
    std::vector<int64_t> counts_;

    unsigned calc_count(const Resource &r, unsigned qc) const;
    unsigned effective_max(const Resource &r) const { return calc_count(r, UINT32_MAX); }

    template <class F>
    void with_cmp(F &&f);

    // select
    bool exclusivity(const std::vector<Resource> &rs, int u);
    // Free units of `u` over the match window; the whole capacity for a
    // satisfiability check, which asks about an empty graph.
    int64_t avail_of(const JobMeta &m, int u) const;
    int64_t sat_time(int64_t duration) const;
    bool by_excl(const JobMeta &m, int u, bool exclusive_in, const Resource &r);
    bool by_subplan(const JobMeta &m, int u, const Resource &r);
    bool shared_ = false;  // some vertex has several parents: no shortcuts
    bool prune(const JobMeta &m, bool excl, int u, const std::vector<Resource> &rs);
    const std::vector<Resource> &test(int u, const std::vector<Resource> &rs, bool &pristine,
                                      unsigned &nslots, MatchKind &kind);
    int dom_dfv(const JobMeta &m, int u, const std::vector<Resource> &rs, bool pristine, bool *excl,
                Scoring &to_parent);
    void add_candidate(int e, bool exclusive, Scoring &dfu);
    int explore(const JobMeta &m, int u, const std::vector<Resource> &rs, bool pristine, bool *excl,
                Scoring &dfu, unsigned multiplier = 1);
    int dom_slot(const JobMeta &m, int u, const std::vector<Resource> &shape, unsigned nslots,
                 bool pristine, Scoring &dfu);
    unsigned cnt_slot(const std::vector<Resource> &shape, Scoring &dfu_slot);
    bool discover_vtx(int u);
    bool finish_vtx(int u, const std::vector<Resource> &rs, Scoring &dfu);
    bool finish_graph(const std::vector<Resource> &rs, Scoring &dfu);
    void finish_slot(Scoring &dfu);
    int resolve(Scoring &dfu, Scoring &to_parent);
    void enforce(Scoring &dfu, bool unconstrained);
    bool resolve_graph(int root, std::vector<Resource> &rs, Scoring &dfu, unsigned &needs);
    bool select(std::vector<Resource> &rs, int root, JobMeta &m, bool excl);
    bool select_tree(std::vector<Resource> &rs, int root, JobMeta &m, bool excl);
    bool request_feasible(const JobMeta &m, MatchOp op, TypeCounts &dfv);
    bool schedule(Jobspec &js, JobMeta &m, bool x, MatchOp op, int root,
                  TypeCounts &dfv);

    // flexible traverser (flexible.cpp): or-slots and xor_slot alternatives
    bool flexible() const { return kind_ == TraverserKind::Flexible; }
    void flex_prime_jobspec(std::vector<Resource> &resources, TypeCounts &to_parent);
    bool flex_prune_resources(const JobMeta &m, bool excl, int u, const std::vector<Resource> &rs);
    bool slot_match(int u, const Resource &slot);
    const std::vector<Resource> &flex_test(int u, const std::vector<Resource> &rs, bool &pristine,
                                           unsigned &nslots, MatchKind &kind);
    int flex_dom_slot(const JobMeta &m, int u, const std::vector<Resource> &slots, unsigned nslots,
                      bool pristine, Scoring &dfu);
    bool flex_select(std::vector<Resource> &rs, int root, JobMeta &m, bool excl);

    // update
    int upd_dfv(int u, Emission &out, uint64_t needs, bool excl, const JobMeta &m, bool full,
                TypeCounts &to_parent, bool emit_shadow);
    void upd_by_outedges(const JobMeta &m, int u, int e);
    bool update(int root, Emission &out, JobMeta &m);

    // deferred bookkeeping below whole nodes (deferred_holds.cpp)
    int defer_below(int u, Emission &out, const JobMeta &m, TypeCounts &dfu);
    void materialize(int u);
    void settle_above(int v);

    // subtree memos (subtree_memo.cpp)
    ScoringPool scoring_pool_;  // the walk's steps' scoring, reused
    // First-match policies walk little and gain nothing from memos.
    bool memo_active() const {
        return memos_.enabled() && !policy_.stop_on_1 && !shared_ && kind_ == TraverserKind::Simple;
    }
    // A change at v: v and (with touch_up) every ancestor differ from any memo.
    void touch(int v) { memos_.touch(v); }
    void touch_up(int v) { memos_.touch_up(g_, v); }
    void apply_stamp(const EdgeStamp &s);
    int dom_dfv_walk(const JobMeta &m, int u, const std::vector<Resource> &rs, bool pristine, bool *excl,
                     Scoring &to_parent, SubtreeMemo *rec);
    int dom_dfv_memo(const JobMeta &m, int u, const std::vector<Resource> &rs, bool pristine, bool *excl,
                     Scoring &to_parent);

    // cancel
    void mod_dfv(int u, int64_t jobid);
    void mod_listed(int64_t jobid, const std::vector<int> &listed);
    int64_t release(int u, int64_t jobid);
    void mod_exv(int64_t jobid);
};

}  // namespace fluxion
