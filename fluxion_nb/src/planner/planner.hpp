// Time-indexed capacity of one resource pool: which units are free when.
// Time is integer seconds over [start, end). A span reserves `planned`
// units over [at, at + duration). Scheduled points are the times at which
// the free amount changes; queries walk them in time order.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "util/small_vec.hpp"

namespace fluxion {

class Planner {
   public:
    Planner() = default;
    Planner(int64_t start, int64_t duration, int64_t total);
    Planner(const Planner &o);
    Planner &operator=(const Planner &o);
    Planner(Planner &&) noexcept = default;
    Planner &operator=(Planner &&) noexcept = default;

    int64_t start() const { return start_; }
    int64_t end() const { return end_; }
    int64_t total() const { return total_; }
    size_t span_count() const { return st_ ? st_->spans.size() : 0; }

    // Minimum number of free units over [at, at + duration); -1 if the window
    // leaves the plan.
    int64_t avail_during(int64_t at, int64_t duration) const;
    // True when `request` units stay free over the whole window.
    bool fits_during(int64_t at, int64_t duration, int64_t request) const;
    int64_t avail_at(int64_t at) const;

    // Reserve `request` units; returns the span id, or -1 if it does not fit.
    int64_t add_span(int64_t at, int64_t duration, int64_t request);
    bool rem_span(int64_t span_id);
    // Give back `amount` units of a span (partial release); the span is
    // removed once nothing is left. Returns false for an unknown span.
    bool reduce_span(int64_t span_id, int64_t amount, bool &removed);
    int64_t span_planned(int64_t span_id) const;
    void reset();
    // Change capacity (graph resize); spans keep their amounts.
    void set_total(int64_t total);

    // Earliest scheduled point at or after `on_or_after` where `request`
    // units stay free for `duration`; -1 if none. next() continues the walk.
    int64_t avail_time_first(int64_t on_or_after, int64_t duration, int64_t request);
    int64_t avail_time_next();

    // Room for `n` planner states to come, taken from memory now.
    static void reserve_states(size_t n);

   private:
    // `indexed` is the free amount the earliest-fit search sees. Like
    // Fluxion's min-time index it is refreshed when a span changes the
    // point or a search has looked at it, but not when the capacity
    // changes: after a grow, untouched points look as full as before.
    struct Point {
        int64_t at;
        int64_t remaining;
        int64_t indexed;
        int refs;
        bool seen = false;  // looked at by the current search
    };
    struct Span {
        int64_t start;
        int64_t last;
        int64_t planned;
    };
    struct SpanRec {
        int64_t id;
        Span span;
    };
    // Everything beyond the capacity, created on first use: a graph has two
    // planners per vertex and most of them never see a span.
    //
    // Sized for the common case, a vertex held by one job from now on: two
    // points (now, and when the hold ends) and one span. A state is made for
    // every vertex a job lands on, so its size is most of what a placement
    // adds to memory; more points or spans move to the heap.
    struct State {
        SmallVec<Point, 2> points;   // sorted by time; points[0].at == start_
        SmallVec<SpanRec, 1> spans;  // sorted by id
        int64_t next_span = 0;
        // avail_time iteration state
        int64_t iter_after = 0, iter_duration = 0, iter_request = 0;
        uint32_t iter_pos = 0;
        bool iter_set = false;
        bool any_seen = false;
        // From a free list (see planner.cpp): states are made by the thousand
        // as jobs land on fresh vertices.
        static void *operator new(size_t size);
        static void operator delete(void *p) noexcept;
    };
    int64_t start_ = 0;
    int64_t end_ = 0;
    int64_t total_ = 0;
    std::unique_ptr<State> st_;  // null: no span, all `total_` free

    State &state();
    SpanRec *find_span(int64_t span_id) const;  // null if unknown
    size_t state_index(int64_t at) const;  // last point with time <= at
    void release_point(size_t idx);
    void reindex(size_t from, size_t to);  // points [from, to) after a span change
    void refresh_seen();                   // a new operation re-indexes what a search saw
    int64_t iterate();
};

// Several planners over the same time line, one per resource type: the
// subtree aggregates used to prune the search. Besides the configured types
// it may keep "hidden" ones (leaf types the prune filters do not name) that
// only ever make the search skip subtrees that cannot hold what is asked;
// nothing else sees them (size(), at(), the availability walk).
class PlannerMulti {
   public:
    PlannerMulti(int64_t start, int64_t duration, const std::vector<int64_t> &totals,
                 const std::vector<int> &types);

    size_t size() const { return planners_.size(); }
    int type_at(size_t i) const { return types_[i]; }
    Planner &at(size_t i) { return planners_[i]; }
    const Planner &at(size_t i) const { return planners_[i]; }
    int index_of(int type) const;
    size_t span_count() const { return spans_.size(); }

    bool fits_during(int64_t at, int64_t duration, const std::vector<int64_t> &counts) const;
    // `hidden_counts` (index-aligned with the hidden types) may be omitted
    // when there are none.
    int64_t add_span(int64_t at, int64_t duration, const std::vector<int64_t> &counts,
                     const std::vector<int64_t> &hidden_counts = {});
    bool rem_span(int64_t span_id);
    // Reduce a span by per-type amounts (index-aligned); `removed` when the
    // configured types' part is empty.
    bool reduce_span(int64_t span_id, const std::vector<int64_t> &amounts, bool &removed,
                     const std::vector<int64_t> &hidden_amounts = {});

    // Hidden types: set them (with their totals) on a plan without spans, or
    // update the totals of the same types; otherwise they are dropped.
    void set_hidden(const std::vector<int> &types, const std::vector<int64_t> &totals);
    size_t hidden_size() const { return hidden_.size(); }
    int hidden_type_at(size_t i) const { return hidden_types_[i]; }
    const Planner &hidden_at(size_t i) const { return hidden_[i]; }
    int64_t span_planned(int64_t span_id, size_t i) const;
    void reset();
    void update_totals(const std::vector<int64_t> &totals);

    int64_t avail_time_first(int64_t on_or_after, int64_t duration,
                             const std::vector<int64_t> &counts);
    int64_t avail_time_next();

   private:
    std::vector<Planner> planners_;
    std::vector<int> types_;
    std::vector<Planner> hidden_;
    std::vector<int> hidden_types_;
    // multi span -> per-planner span ids, configured then hidden (-1: none),
    // sorted by multi span id (ids only grow, so a new span goes last). Inline
    // ids: a span costs no heap block of its own.
    using SpanIds = SmallVec<int64_t, 4>;
    std::vector<std::pair<int64_t, SpanIds>> spans_;
    std::vector<std::pair<int64_t, SpanIds>>::iterator find_span(int64_t span_id);
    std::vector<std::pair<int64_t, SpanIds>>::const_iterator find_span(int64_t span_id) const;
    int64_t next_span_ = 0;
    std::vector<int64_t> iter_counts_;
    void rem_hidden(SpanIds &ids);  // remove a span's hidden parts
    int64_t iter_duration_ = 0;
};

}  // namespace fluxion
