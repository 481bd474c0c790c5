#include "planner/planner.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <new>

#include "util/block_pool.hpp"

namespace fluxion {

void *Planner::State::operator new(size_t) { return take_block<sizeof(State)>(); }

void Planner::State::operator delete(void *p) noexcept { give_block<sizeof(State)>(p); }

void Planner::reserve_states(size_t n) { reserve_blocks<sizeof(State)>(n); }

Planner::Planner(int64_t start, int64_t duration, int64_t total)
    : start_(start), end_(start + duration), total_(total) {}

Planner::Planner(const Planner &o)
    : start_(o.start_), end_(o.end_), total_(o.total_),
      st_(o.st_ ? std::make_unique<State>(*o.st_) : nullptr) {}

Planner &Planner::operator=(const Planner &o) {
    if (this != &o) *this = Planner(o);
    return *this;
}

Planner::State &Planner::state() {
    if (!st_) {
        st_.reset(new State);  // default-initialized: the inline buffers need no zeroing
        st_->points.push_back(Point{start_, total_, total_, 1});
    }
    return *st_;
}

Planner::SpanRec *Planner::find_span(int64_t span_id) const {
    if (!st_) return nullptr;
    auto &sp = st_->spans;
    auto it = std::lower_bound(sp.begin(), sp.end(), span_id,
                               [](const SpanRec &r, int64_t id) { return r.id < id; });
    return it != sp.end() && it->id == span_id ? it : nullptr;
}

size_t Planner::state_index(int64_t at) const {
    // upper_bound on time, minus one: the point in force at `at`.
    const auto &pts = st_->points;
    auto it = std::upper_bound(pts.begin(), pts.end(), at,
                               [](int64_t t, const Point &p) { return t < p.at; });
    if (it == pts.begin()) return 0;
    return static_cast<size_t>(it - pts.begin()) - 1;
}

int64_t Planner::avail_at(int64_t at) const {
    if (at < start_ || at >= end_) return -1;
    if (!st_) return total_;
    return st_->points[state_index(at)].remaining;
}

int64_t Planner::avail_during(int64_t at, int64_t duration) const {
    // A plan may end at INT64_MAX, so the window's end is checked for overflow.
    int64_t last;
    if (at < start_ || __builtin_add_overflow(at, duration, &last) || last > end_) return -1;
    if (!st_) return total_;
    const auto &pts = st_->points;
    size_t i = state_index(at);
    int64_t m = pts[i].remaining;
    for (++i; i < pts.size() && pts[i].at < last; ++i) m = std::min(m, pts[i].remaining);
    return m;
}

bool Planner::fits_during(int64_t at, int64_t duration, int64_t request) const {
    if (request > total_) return false;
    int64_t a = avail_during(at, duration);
    return a >= 0 && request <= a;
}

void Planner::reindex(size_t from, size_t to) {
    auto &pts = st_->points;
    for (size_t i = from; i < to && i < pts.size(); ++i) pts[i].indexed = pts[i].remaining;
}

void Planner::refresh_seen() {
    if (!st_ || !st_->any_seen) return;
    for (auto &p : st_->points)
        if (p.seen) {
            p.indexed = p.remaining;
            p.seen = false;
        }
    st_->any_seen = false;
}

void Planner::release_point(size_t idx) {
    auto &pts = st_->points;
    if (--pts[idx].refs <= 0 && idx != 0) pts.erase(pts.begin() + static_cast<long>(idx));
}

int64_t Planner::add_span(int64_t at, int64_t duration, int64_t request) {
    int64_t last;
    if (duration < 1 || at < start_ || __builtin_add_overflow(at, duration, &last) || last > end_ ||
        request < 0 || request > total_)
        return -1;
    // One pass over the window's points finds where it ends and whether the
    // request fits; a fresh state has all total_ >= request free.
    State &st = state();
    auto &pts = st.points;
    size_t i = state_index(at);
    size_t j = i + 1;
    int64_t low = pts[i].remaining;
    for (; j < pts.size() && pts[j].at < last; ++j) low = std::min(low, pts[j].remaining);
    if (low < request) return -1;
    refresh_seen();
    // The end point takes the amount in force just before it; then the start
    // point, which shifts the end by one when it is new.
    if (j < pts.size() && pts[j].at == last) {
        pts[j].refs++;
    } else {
        int64_t before = pts[j - 1].remaining;
        pts.insert(pts.begin() + static_cast<long>(j), Point{last, before, before, 1});
    }
    size_t s = i;
    if (pts[i].at == at) {
        pts[i].refs++;
    } else {
        int64_t before = pts[i].remaining;
        pts.insert(pts.begin() + static_cast<long>(i) + 1, Point{at, before, before, 1});
        s = i + 1;
        ++j;
    }
    for (size_t k = s; k < j; ++k) {
        pts[k].remaining -= request;
        pts[k].indexed = pts[k].remaining;
    }
    int64_t id = st.next_span++;
    st.spans.push_back(SpanRec{id, Span{at, last, request}});  // ids only grow
    st.iter_set = false;
    return id;
}

bool Planner::rem_span(int64_t span_id) {
    if (!st_) return false;
    State &st = *st_;
    SpanRec *rec = find_span(span_id);
    if (!rec) return false;
    Span sp = rec->span;
    st.spans.erase(rec);
    refresh_seen();
    size_t s = state_index(sp.start);
    size_t e = state_index(sp.last);
    for (size_t i = s; i < e; ++i) st.points[i].remaining += sp.planned;
    reindex(s, e);
    // Release the end point first so the start index stays valid.
    release_point(e);
    release_point(state_index(sp.start));
    st.iter_set = false;
    return true;
}

bool Planner::reduce_span(int64_t span_id, int64_t amount, bool &removed) {
    removed = false;
    if (!st_) return false;
    State &st = *st_;
    SpanRec *rec = find_span(span_id);
    if (!rec) return false;
    Span &sp = rec->span;
    amount = std::min(amount, sp.planned);
    if (amount >= sp.planned) {
        removed = true;
        return rem_span(span_id);
    }
    refresh_seen();
    size_t s = state_index(sp.start);
    size_t e = state_index(sp.last);
    for (size_t i = s; i < e; ++i) st.points[i].remaining += amount;
    reindex(s, e);
    sp.planned -= amount;
    st.iter_set = false;
    return true;
}

int64_t Planner::span_planned(int64_t span_id) const {
    const SpanRec *rec = find_span(span_id);
    return rec ? rec->span.planned : -1;
}

void Planner::reset() {
    if (!st_) return;
    // Span ids keep counting up, so an id from before the reset stays unknown.
    st_->spans.clear();
    st_->points.clear();
    st_->points.push_back(Point{start_, total_, total_, 1});
    st_->iter_set = false;
    st_->any_seen = false;
}

void Planner::set_total(int64_t total) {
    int64_t delta = total - total_;
    if (delta == 0) return;
    // The index keeps the old amounts (see Point), so the points must exist.
    state();
    total_ = total;
    for (auto &p : st_->points) p.remaining += delta;
    st_->iter_set = false;
}

int64_t Planner::iterate() {
    State &st = *st_;
    auto &pts = st.points;
    while (st.iter_pos < pts.size()) {
        Point &p = pts[st.iter_pos++];
        // Candidates come from the index; the window is checked on what is free.
        if (p.indexed < st.iter_request) continue;
        p.seen = true;
        st.any_seen = true;
        if (p.at < st.iter_after) continue;
        bool ok = true;
        for (size_t j = st.iter_pos - 1; j < pts.size() && pts[j].at < p.at + st.iter_duration; ++j)
            if (pts[j].remaining < st.iter_request) {
                ok = false;
                break;
            }
        if (!ok) continue;
        if (st.iter_duration > end_ - p.at) return -1;
        return p.at;
    }
    return -1;
}

int64_t Planner::avail_time_first(int64_t on_or_after, int64_t duration, int64_t request) {
    if (on_or_after < start_ || on_or_after >= end_ || duration < 1 || request > total_) return -1;
    State &st = state();
    refresh_seen();
    st.iter_pos = 0;
    st.iter_after = on_or_after;
    st.iter_duration = duration;
    st.iter_request = request;
    st.iter_set = true;
    return iterate();
}

int64_t Planner::avail_time_next() {
    if (!st_ || !st_->iter_set) return -1;
    return iterate();
}

PlannerMulti::PlannerMulti(int64_t start, int64_t duration, const std::vector<int64_t> &totals,
                           const std::vector<int> &types)
    : types_(types) {
    planners_.reserve(totals.size());
    for (int64_t t : totals) planners_.emplace_back(start, duration, t);
}

int PlannerMulti::index_of(int type) const {
    for (size_t i = 0; i < types_.size(); ++i)
        if (types_[i] == type) return static_cast<int>(i);
    return -1;
}

bool PlannerMulti::fits_during(int64_t at, int64_t duration,
                               const std::vector<int64_t> &counts) const {
    for (size_t i = 0; i < planners_.size(); ++i)
        if (!planners_[i].fits_during(at, duration, counts[i])) return false;
    return true;
}

int64_t PlannerMulti::add_span(int64_t at, int64_t duration, const std::vector<int64_t> &counts,
                               const std::vector<int64_t> &hidden_counts) {
    SpanIds ids;
    for (size_t i = 0; i < planners_.size() + hidden_.size(); ++i) ids.push_back(-1);
    for (size_t i = 0; i < planners_.size(); ++i) {
        ids[i] = planners_[i].add_span(at, duration, counts[i]);
        if (ids[i] < 0) {
            for (size_t j = 0; j < i; ++j) planners_[j].rem_span(ids[j]);
            return -1;
        }
    }
    // A hidden span that does not fit is left out: the hidden plan then only
    // shows more free than there is, which prunes less, never wrongly. So is
    // one of nothing: only the free amounts of a hidden plan are ever read,
    // never its time points.
    for (size_t j = 0; j < hidden_.size() && j < hidden_counts.size(); ++j)
        if (hidden_counts[j] > 0) ids[planners_.size() + j] = hidden_[j].add_span(at, duration, hidden_counts[j]);
    int64_t id = next_span_++;
    spans_.emplace_back(id, std::move(ids));
    return id;
}

bool PlannerMulti::rem_span(int64_t span_id) {
    auto it = find_span(span_id);
    if (it == spans_.end()) return false;
    for (size_t i = 0; i < planners_.size(); ++i) planners_[i].rem_span(it->second[i]);
    rem_hidden(it->second);
    spans_.erase(it);
    return true;
}

void PlannerMulti::rem_hidden(SpanIds &ids) {
    for (size_t j = 0; j < hidden_.size(); ++j) {
        int64_t &sid = ids[planners_.size() + j];
        if (sid >= 0) hidden_[j].rem_span(sid);
        sid = -1;
    }
}

bool PlannerMulti::reduce_span(int64_t span_id, const std::vector<int64_t> &amounts, bool &removed,
                               const std::vector<int64_t> &hidden_amounts) {
    removed = false;
    auto it = find_span(span_id);
    if (it == spans_.end()) return false;
    bool all_gone = true;
    for (size_t i = 0; i < planners_.size(); ++i) {
        int64_t sid = it->second[i];
        if (sid < 0) continue;
        bool gone = false;
        if (amounts[i] > 0) planners_[i].reduce_span(sid, amounts[i], gone);
        if (gone)
            it->second[i] = -1;
        else if (planners_[i].span_planned(sid) > 0)
            all_gone = false;
    }
    for (size_t j = 0; j < hidden_.size(); ++j) {
        int64_t &sid = it->second[planners_.size() + j];
        if (sid < 0) continue;
        bool gone = false;
        if (j < hidden_amounts.size() && hidden_amounts[j] > 0) hidden_[j].reduce_span(sid, hidden_amounts[j], gone);
        if (gone) sid = -1;
    }
    if (all_gone) {
        for (size_t i = 0; i < planners_.size(); ++i)
            if (it->second[i] >= 0) planners_[i].rem_span(it->second[i]);
        rem_hidden(it->second);
        spans_.erase(it);
        removed = true;
    }
    return true;
}

void PlannerMulti::set_hidden(const std::vector<int> &types, const std::vector<int64_t> &totals) {
    if (types == hidden_types_) {
        for (size_t j = 0; j < hidden_.size(); ++j) hidden_[j].set_total(totals[j]);
        return;
    }
    // Other types while spans exist: their past is unknown, so keep none.
    for (auto &kv : spans_) {
        rem_hidden(kv.second);
        while (kv.second.size() > planners_.size()) kv.second.erase(kv.second.end() - 1);
    }
    hidden_.clear();
    hidden_types_.clear();
    if (!spans_.empty() || planners_.empty()) return;
    int64_t start = planners_[0].start(), duration = planners_[0].end() - planners_[0].start();
    hidden_types_ = types;
    for (int64_t t : totals) hidden_.emplace_back(start, duration, t);
}

auto PlannerMulti::find_span(int64_t span_id) -> std::vector<std::pair<int64_t, SpanIds>>::iterator {
    auto it = std::lower_bound(spans_.begin(), spans_.end(), span_id,
                               [](const std::pair<int64_t, SpanIds> &s, int64_t id) { return s.first < id; });
    return it != spans_.end() && it->first == span_id ? it : spans_.end();
}

auto PlannerMulti::find_span(int64_t span_id) const -> std::vector<std::pair<int64_t, SpanIds>>::const_iterator {
    return const_cast<PlannerMulti *>(this)->find_span(span_id);
}

int64_t PlannerMulti::span_planned(int64_t span_id, size_t i) const {
    auto it = find_span(span_id);
    if (it == spans_.end() || it->second[i] < 0) return 0;
    return planners_[i].span_planned(it->second[i]);
}

void PlannerMulti::reset() {
    for (auto &p : planners_) p.reset();
    for (auto &p : hidden_) p.reset();
    spans_.clear();
}

void PlannerMulti::update_totals(const std::vector<int64_t> &totals) {
    for (size_t i = 0; i < planners_.size() && i < totals.size(); ++i)
        planners_[i].set_total(totals[i]);
}

int64_t PlannerMulti::avail_time_first(int64_t on_or_after, int64_t duration,
                                       const std::vector<int64_t> &counts) {
    if (planners_.empty()) return -1;
    iter_counts_ = counts;
    iter_duration_ = duration;
    int64_t t = planners_[0].avail_time_first(on_or_after, duration, counts[0]);
    while (t != -1) {
        bool met = true;
        for (size_t i = 1; i < planners_.size(); ++i)
            if (!planners_[i].fits_during(t, duration, counts[i])) {
                met = false;
                break;
            }
        if (met) return t;
        t = planners_[0].avail_time_next();
    }
    return -1;
}

int64_t PlannerMulti::avail_time_next() {
    if (planners_.empty()) return -1;
    for (;;) {
        int64_t t = planners_[0].avail_time_next();
        if (t == -1) return -1;
        bool met = true;
        for (size_t i = 1; i < planners_.size(); ++i)
            if (!planners_[i].fits_during(t, iter_duration_, iter_counts_[i])) {
                met = false;
                break;
            }
        if (met) return t;
    }
}

}  // namespace fluxion
