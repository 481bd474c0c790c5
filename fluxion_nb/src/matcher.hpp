// The matcher's public face: one resource graph, a policy, and the jobs
// placed on it. Every operation validates its input before changing state
// and is serialised by one mutex, so concurrent callers cannot corrupt it.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "graph/graph.hpp"
#include "jobspec/jobspec.hpp"
#include "traverser/traverser.hpp"
#include "writers/writers.hpp"

namespace fluxion {

struct MatcherOptions {
    std::string policy = "first";
    std::string prune_filters = "ALL:core,ALL:node";
    std::string match_format = "jgf";
    std::set<std::string> partial_pool_types;
    std::string traverser = "simple";  // simple | flexible (or-slots, xor_slot)
    // resource-query's -S name (see subsystems.hpp). Matching walks the
    // dominant subsystem's tree; the others named are not walked.
    std::string subsystems = "CA";
    // Shortcuts that change no result, only the work done: bookkeeping below
    // whole nodes done when first needed (DeferredHolds), hidden aggregates
    // of the leaf types to skip subtrees that lack them (HiddenAggregates),
    // and an update walk that visits only the chosen children of a wide
    // vertex (WideEdgeLists). Off is for checking that they change nothing.
    bool shortcuts = true;
    // Subtree memos (SubtreeMemos), part of the shortcuts; off alone is
    // for checking that they change nothing, traversal counts included.
    bool memos = true;
    // resource-query answers `info` and counts in `stat` for cancelled jobs, so
    // their records stay. A long-running service that schedules a job per pod
    // sets this false: a cancelled job is forgotten at once.
    bool keep_canceled = true;
    // resource-query's rv1 writer keeps the scheduling graph of an R it did
    // not write (R_lite recorded nothing) and writes it ahead of the next R
    // of the session's format (see UnprintedSchedule). fluxion-rq sets this;
    // elsewhere each R holds only its own job's vertices.
    bool carry_unprinted_schedule = false;
};

struct AllocatedVertex {
    std::string path;
    std::string type;
    std::string name;
    int64_t id;
    int64_t rank;
    int64_t amount;
    bool exclusive;
    std::string node;  // enclosing vertex of type node ("" if none)
    std::map<std::string, std::string> properties;
};

struct MatchResult {
    // allocated | reserved | matched | satisfiable | busy | unsatisfiable | error
    std::string status;
    int64_t jobid = 0;
    int64_t at = 0;
    int64_t duration = 0;
    double overhead = 0.0;
    std::string R;
    std::string error;
    // The allocated vertices in emission order, described on demand by
    // Matcher::describe (most callers never look at them).
    std::vector<EmittedVertex> emitted;
    unsigned preorder = 0, postorder = 0;
};

struct JobRecord {
    int64_t jobid;
    std::string state;  // ALLOCATED | RESERVED | CANCELED
    int64_t at;
    int64_t duration;
    double overhead;
    std::string R;
    std::vector<int> vertices;  // allocated vertices (emission order)
};

struct GraphStats {
    int64_t vertices = 0, edges = 0, jobs = 0;
};

class Matcher {
   public:
    // `jgf` is only read during construction (no copy is kept).
    Matcher(std::string_view jgf, MatcherOptions opts);

    // op: allocate | allocate_orelse_reserve | allocate_with_satisfiability |
    //     satisfiability | without_allocating | without_allocating_future
    // `now`: the time the match is made at (flux-sched's queue passes the
    // clock); a job that starts at `now` is allocated, a later one reserved.
    MatchResult match(const std::string &jobspec_json, const std::string &op,
                      std::optional<int64_t> jobid = std::nullopt,
                      const std::string &format = "", int64_t now = 0);
    // Replay a known allocation. `reader` says how R is read: "jgf" (or
    // "jgf_shorthand"): the vertices of its JGF graph (scheduling.graph, as
    // the jgf/rv1 writers write it); "rv1exec": the ranks, hosts and child
    // ids of execution.R_lite and nodelist, found as flux-sched's rv1exec
    // reader finds them (see readers/rv1exec.hpp); "": JGF when R has a
    // graph, else rv1exec. R's own start and expiration are not read: the
    // job holds [at, at + duration). As flux-sched's update: the vertices
    // record an allocation (a reservation only when `reserve`), a node-
    // exclusive policy takes each node reached whole, and the job is
    // RESERVED when it starts after `now` (or `reserve`), else ALLOCATED.
    MatchResult update_allocate(int64_t jobid, const std::string &R, int64_t at, int64_t duration,
                                bool reserve, const std::string &format = "", const std::string &reader = "",
                                int64_t now = 0);
    // Hold given amounts of given vertices (path -> units, each held
    // exclusively by the job) as a new job over [at, at + duration): what
    // update_allocate does for an R naming those vertices and their
    // ancestors, without writing or reading R. For callers that already know
    // what a job holds (a gang split into one job per member).
    void hold(int64_t jobid, const std::vector<std::pair<std::string, int64_t>> &holdings, int64_t at,
              int64_t duration);
    bool cancel(int64_t jobid, bool noent_ok);
    // Release the part of a job held under each given vertex path; returns
    // true when the job is gone entirely.
    bool partial_cancel(int64_t jobid, const std::vector<std::string> &paths);
    // Release the part of a job an R describes, read as resource-query's
    // partial-cancel reads it: "jgf" (the vertices of R's JGF graph) or
    // "rv1exec" (every vertex of R_lite's broker ranks).
    bool partial_cancel_r(int64_t jobid, const std::string &R, const std::string &format = "jgf");

    // What each emitted vertex of a match is: path, type, name, node, ...
    std::vector<AllocatedVertex> describe(const std::vector<EmittedVertex> &emitted) const;
    // Per enclosing node (first-seen order): type -> units held exclusively,
    // node vertices themselves left out. What describe would give summed up,
    // without describing every vertex.
    using NodeHoldings = std::vector<std::pair<std::string, std::vector<std::pair<std::string, int64_t>>>>;
    NodeHoldings held_by_node(const std::vector<EmittedVertex> &emitted) const;

    std::optional<JobRecord> info(int64_t jobid) const;
    std::vector<JobRecord> jobs() const;
    GraphStats stat() const;
    int64_t next_jobid() const;
    // The id the next match takes (resource-query sets it after an update to the
    // updated job's id plus one, whatever came before).
    void set_next_jobid(int64_t id);

    void set_status(const std::string &path, bool up);
    bool get_status(const std::string &path) const;
    void set_property(const std::string &path, const std::string &key, const std::string &value);
    std::map<std::string, std::string> get_property(const std::string &path) const;
    // The graph-wide unique id of the vertex at `path` (NotFoundError if none).
    int64_t uniq_id(const std::string &path) const;

    // Grow: add a JGF subgraph; shrink: remove a subtree (jobs on it keep the
    // rest of their allocation; a reservation there must be cancelled first).
    void attach(const std::string &jgf);
    void remove(const std::string &path);
    // Shrink by broker rank: remove, for each rank of the idset ("[1-2]"),
    // the subtree of its top vertex. Throws NotFoundError for an unknown rank
    // before anything is removed.
    void remove_ranks(const std::string &idset);

    // Per vertex: path, type, size, allocated-now amount.
    struct Usage {
        std::string path, type, name;
        int64_t size, used;
    };
    std::vector<Usage> usage(int64_t at = 0) const;

    // resource-query's find: the vertices matching `criteria` (see find.hpp)
    // written in `format` ("" = the matcher's format). Throws InputError.
    std::string find(const std::string &criteria, const std::string &format = "") const;
    // Vertices entered and finished by the last traversal (match or cancel).
    std::pair<unsigned, unsigned> traversal_counts() const;
    // Subtree walks answered from the traverser's memos so far.
    uint64_t memo_hits() const;

    std::string policy() const { return opts_.policy; }
    std::string traverser() const { return opts_.traverser; }
    std::string match_format() const { return opts_.match_format; }
    void set_match_format(const std::string &f);
    std::string last_error() const { return last_err_; }

   private:
    mutable std::mutex mu_;
    MatcherOptions opts_;
    void finish(std::map<int64_t, JobRecord>::iterator it);  // a job fully released
    // A job that may be released in part (allocated, not cancelled), settled.
    std::map<int64_t, JobRecord>::iterator partly_cancelable(int64_t jobid);
    bool release_part(std::map<int64_t, JobRecord>::iterator it, const std::vector<int> &release);
    void advance_counter(int64_t used);
    // Vertices whose scheduling state is reserved at load: about 7 MB at most
    // (2 x 168-byte planner states and 80 bytes of table blocks each).
    static constexpr size_t kReservedVertices = 16384;
    RFormat format_ = RFormat::Jgf;  // opts_.match_format, read once
    // Where a write in the session's format keeps what it did not write;
    // null for another format or when the option is off.
    UnprintedSchedule *carry_for(const std::string &format) const;
    mutable UnprintedSchedule unprinted_;
    std::unique_ptr<Graph> g_;
    std::unique_ptr<Traverser> trav_;
    std::map<int64_t, JobRecord> jobs_;
    int64_t counter_ = 1;
    std::string last_err_;

    // Recently parsed jobspecs by text: schedulers send the same few shapes
    // again and again, and parsing costs as much as matching a node.
    // Kept by address: the traverser's subtree memos know a request by it.
    std::vector<std::pair<std::string, std::unique_ptr<Jobspec>>> parsed_;
    Jobspec &parse_cached(const std::string &jobspec_json);

    int vertex_at(const std::string &path) const;
    // The vertex itself or its nearest ancestor of type node; -1 when none.
    int enclosing_node(int v) const;
    // Throws unless `jobid` is free and [at, at + duration) lies in the graph's span.
    void check_new_job(int64_t jobid, int64_t at, int64_t duration, const char *op) const;
    std::map<int, std::pair<int64_t, bool>> read_r_amounts(const std::string &R) const;
    std::map<int, std::pair<int64_t, bool>> read_r_amounts(const json::Value &doc) const;
    std::vector<int> named_holdings(int64_t jobid, const std::string &R) const;
    std::vector<int> rank_holdings(int64_t jobid, const std::string &R) const;
};

}  // namespace fluxion
