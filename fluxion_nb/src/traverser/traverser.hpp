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
#include "traverser/scoring.hpp"

namespace fluxion {

enum class AllocType { Alloc, AllocOrReserve, Satisfiability, NoAlloc };

// resource-query's match operations.
enum class MatchOp {
    Allocate,
    AllocateOrElseReserve,
    AllocateWithSatisfiability,
    Satisfiability,
    WithoutAllocating,
    WithoutAllocatingFuture,
};
// An operation by its resource-query name; InputError for an unknown one.
MatchOp match_op(std::string_view name);

// Why a match failed, with flux-sched's errno meaning. Unset is internal: a
// subtree memo being recorded has not seen an error yet.
enum class MatchErr { None = 0, Busy, Unsatisfiable, Range, NoEntry, Invalid, Unset };

struct JobMeta {
    int64_t jobid = 0;
    int64_t at = 0;
    int64_t now = 0;
    int64_t duration = 0;
    AllocType alloc_type = AllocType::Alloc;
    const Constraint *constraint = nullptr;
    std::string queue;
};

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
        invalidate_memos();
    }
    TraverserKind kind() const { return kind_; }
    void set_kind(TraverserKind k) {
        kind_ = k;
        invalidate_memos();
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
    bool replay(int64_t jobid, int64_t at, int64_t duration, bool reserve,
                const std::map<int, std::pair<int64_t, bool>> &amounts, Emission &out,
                std::string &why);

    // Apply every deferred node-wide bookkeeping (see deferred_holds.cpp);
    // needed before reading vertices' scheduling state directly.
    void settle();
    // See MatcherOptions::shortcuts.
    void set_shortcuts(bool on, bool memos = true) {
        settle();
        defer_ = on;
        hidden_enabled_ = on;
        wide_enabled_ = on;
        memos_ = on && memos;
        invalidate_memos();
    }
    // Forget every subtree memo: for changes made to vertices directly
    // (status, properties) rather than through the traverser.
    void invalidate_memos() { ++config_epoch_; }

    // Subtree walks answered from a memo (see subtree_memo.cpp).
    uint64_t memo_hits() const { return memo_hits_; }
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
        wide_stamps_.clear();
        wide_listed_ = wide_enabled_;
    }
    // Choosing an edge for the update walk. Edges out of a wide vertex (a
    // cluster of thousands of nodes) are also listed by source, so the walk
    // visits the chosen few instead of reading every out-edge's stamp. A
    // search that stamps more than the list is meant for (scoring policies
    // stamp every subtree's local choice) gives the list up for that walk.
    static constexpr size_t kWideFanout = 256;
    static constexpr size_t kWideListed = 4096;
    std::vector<std::pair<int, int>> wide_stamps_;  // (source, edge), this seq
    bool wide_enabled_ = true;  // a shortcut (set_shortcuts)
    bool wide_listed_ = true;   // every stamp out of a wide vertex is in wide_stamps_
    void stamp(int e) {
        Edge &ed = E(e);
        ed.seq = seq_;
        if (!wide_listed_ || V(ed.source).out_edges.size() < kWideFanout) return;
        if (wide_stamps_.size() >= kWideListed) {
            wide_listed_ = false;
            wide_stamps_.clear();
            return;
        }
        wide_stamps_.emplace_back(ed.source, e);
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
    static int64_t count_of(const TypeCounts &m, int type);
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
    bool hidden_enabled_ = true;
    bool shared_ = false;  // some vertex has several parents: no shortcuts
    bool hidden_prune_ = false;  // this match may use the hidden aggregates
    bool by_hidden(const JobMeta &m, const PlannerMulti &p, const Resource &r);
    const std::vector<int64_t> &hidden_counts(const PlannerMulti &p, const TypeCounts &m);
    std::vector<int64_t> hidden_counts_;
    bool plain_request(const std::vector<Resource> &rs);
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
    struct DeferredHold {
        JobMeta m;
        bool stop_on_1;
    };
    std::unordered_map<int, std::vector<DeferredHold>> deferred_;  // node -> holds, oldest first
    uint64_t settle_epoch_ = uint64_t{1} << 62;                    // marks apart from epoch_'s
    bool defer_ = true;
    bool defers_below(int u, bool mod, const JobMeta &m, bool full) const;
    // The dominant tree in post-order, for emitting a whole subtree at once.
    struct ShadowEntry {
        int vertex;
        int edge;   // from its parent
        int depth;  // below the root
    };
    std::vector<ShadowEntry> shadow_order_;
    std::vector<int> shadow_first_;  // per vertex: first entry of its subtree
    std::vector<int> shadow_pos_;    // per vertex: its own entry (-1: not below the root)
    bool shadow_valid_ = false;      // rebuilt after any change to the graph's shape
    std::vector<int64_t> shadow_sums_;
    std::vector<char> shadow_seen_;
    // Subtrees the update walk emitted whole, written out once it is over
    // (expand_runs): each stands in the emission as one placeholder entry
    // whose vertex is -1 - its index here.
    struct EmittedRun {
        size_t first, last;  // the subtree's entries in shadow_order_
        int base;            // level of the subtree's root minus its depth
    };
    std::vector<EmittedRun> runs_;
    void build_shadow_order();
    int defer_below(int u, Emission &out, const JobMeta &m, TypeCounts &dfu);
    void expand_runs(Emission &out);
    void materialize(int u);
    void settle_above(int v);

    // subtree memos (subtree_memo.cpp)
    struct MemoKey {
        uint64_t config = 0;
        uint64_t spec = 0;
        const void *rs = nullptr;
        int64_t at = 0, now = 0, duration = 0, multilevel = 0;
        AllocType alloc_type = AllocType::Alloc;
        bool pristine = false, excl = false, hidden = false;
        bool operator==(const MemoKey &o) const {
            return config == o.config && spec == o.spec && rs == o.rs && at == o.at && now == o.now &&
                   duration == o.duration && multilevel == o.multilevel && alloc_type == o.alloc_type &&
                   pristine == o.pristine && excl == o.excl && hidden == o.hidden;
        }
    };
    struct EdgeStamp {
        int edge;
        uint64_t needs;
        unsigned exclusive;
    };
    struct SubtreeMemo {
        MemoKey key;
        uint64_t version = 0;
        int rc = -1;
        bool err_set = false;
        MatchErr err = MatchErr::None;
        std::string msg;
        unsigned pre = 0, post = 0;
        int64_t multilevel_delta = 0;
        int64_t node_factor = 0;
        bool excl_out = false;
        unsigned avail = 0;
        int64_t overall = 0;
        bool merged = false;
        Scoring scoring;
        std::vector<EdgeStamp> stamps;
    };
    uint64_t config_epoch_ = 1;
    uint64_t clock_ = 1;
    uint64_t spec_serial_ = 0;
    std::vector<uint64_t> version_;                    // per vertex: last change at or below it
    std::vector<std::unique_ptr<SubtreeMemo>> memo_;   // per vertex: its last walk
    std::vector<char> memo_big_;                       // per vertex: worth remembering
    std::vector<EdgeStamp> stamp_log_;                 // stamps made while recording
    ScoringPool scoring_pool_;                         // the walk's steps' scoring, reused
    int recording_ = 0;
    uint64_t memo_hits_ = 0;
    bool memos_ = true;
    // First-match policies walk little and gain nothing from memos.
    bool memo_active() const {
        return memos_ && !policy_.stop_on_1 && !shared_ && kind_ == TraverserKind::Simple;
    }
    void size_memos();
    // A change at v: v and (with touch_up) every ancestor differ from any memo.
    void touch(int v) {
        if (static_cast<size_t>(v) < version_.size()) version_[static_cast<size_t>(v)] = ++clock_;
    }
    void touch_up(int v);
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
