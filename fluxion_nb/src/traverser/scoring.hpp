// Candidate bookkeeping for one step of the depth-first match: for each
// resource type, the groups of child edges that could satisfy it, their
// scores, and which of them the policy chose.
#pragma once
#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "util/small_vec.hpp"
#include "util/sort_prefix.hpp"

namespace fluxion {

constexpr int64_t kMatchUnmet = 0;
constexpr int64_t kMatchMet = 1;

struct EvalEdge {
    unsigned count = 0;
    unsigned needs = 0;
    unsigned exclusive = 0;
    int edge = -1;  // -1: the graph root (no parent edge)
};

struct EdgeGroup {
    int64_t score = -1;
    unsigned count = 0;
    unsigned needs = 0;
    unsigned exclusive = 0;
    bool root = false;
    SmallVec<EvalEdge, 1> edges;  // one edge except for slots
};

class Evals {
   public:
    void add(EdgeGroup g) {
        total_ += g.count;
        if (g.score > cutline_) qual_ += g.count;
        tail_.push_back(std::move(g));
    }
    // Appends o's groups after this one's. Frozen runs are shared, not copied.
    void merge(Evals &&o) {
        qual_ += o.qual_;
        total_ += o.total_;
        if (!o.frozen_.empty()) {
            freeze();
            frozen_.insert(frozen_.end(), std::make_move_iterator(o.frozen_.begin()),
                           std::make_move_iterator(o.frozen_.end()));
        }
        if (tail_.empty())
            tail_.swap(o.tail_);  // o keeps this one's (empty) buffer for reuse
        else
            tail_.insert(tail_.end(), std::make_move_iterator(o.tail_.begin()),
                         std::make_move_iterator(o.tail_.end()));
    }
    // Makes the groups so far an immutable run that copies of this Evals
    // share (a subtree memo keeps one; the walk passes the other up).
    void freeze() {
        if (tail_.empty()) return;
        frozen_.push_back(std::make_shared<const std::vector<EdgeGroup>>(std::move(tail_)));
        tail_.clear();
    }
    // Forget every group but keep the buffers, for reuse by another step.
    void clear() {
        frozen_.clear();
        tail_.clear();
        chosen_.clear();
        whole_ = false;
        iter_ = 0;
        iter_reset_ = true;
        cutline_ = 0;
        qual_ = total_ = best_k_ = best_i_ = 0;
    }
    unsigned qualified_count() const { return qual_; }
    unsigned total_count() const { return total_; }
    unsigned best_k() const { return best_k_; }
    unsigned best_i() const { return best_i_; }
    // The i-th chosen group (i < best_i()), in the policy's order.
    const EdgeGroup &chosen(unsigned i) const { return whole_ ? tail_[i] : chosen_[i]; }
    // Every group, in order (after choose_all: the policy's order).
    const std::vector<EdgeGroup> &groups() {
        flatten();
        return tail_;
    }

    // Mark the best k units, as the first k after std::sort by score
    // (descending when `high`). Only the chosen groups are put in order: the
    // others are never read again.
    template <class Cmp>
    bool choose_best_k(unsigned k, Cmp cmp) {
        if (k == 0 || k > qual_) return false;
        if (best_k_ > 0) {
            // Chosen before (or-slots of one type): as flux-sched, sort again
            // what the last choice left in place.
            if (!whole_) sort_in_place(cmp);
            sort_in_place(cmp);
            mark_prefix(k);
            return true;
        }
        chosen_.clear();
        if (size() == 1) {
            // One group: nothing to order (a first-fit walk's common case).
            const EdgeGroup &only = frozen_.empty() ? tail_[0] : (*frozen_[0])[0];
            best_i_ = mark_needs(k, [&](unsigned) -> EdgeGroup & {
                chosen_.push_back(only);
                return chosen_.back();
            });
        } else {
            std::vector<const EdgeGroup *> &at = scratch_groups();
            const std::vector<ScoreKey> &keys = sort_keys(at, k, cmp);
            best_i_ = mark_needs(k, [&](unsigned i) -> EdgeGroup & {
                chosen_.push_back(*at[keys[i].index]);
                return chosen_.back();
            });
        }
        whole_ = false;
        best_k_ = k;
        return true;
    }
    // The same with every qualified unit, and all groups put in order.
    template <class Cmp>
    bool choose_all(Cmp cmp) {
        unsigned k = qual_;
        if (k == 0) return false;
        if (best_k_ > 0 && !whole_) sort_in_place(cmp);
        sort_in_place(cmp);
        mark_prefix(k);
        return true;
    }

    // Iteration used to cut slots out of candidates.
    void iter_reset() { iter_reset_ = true; }
    EdgeGroup *iter_next() {
        flatten();
        if (iter_reset_) {
            iter_ = 0;
            iter_reset_ = false;
        } else if (iter_ < tail_.size()) {
            ++iter_;
        }
        return iter_ < tail_.size() ? &tail_[iter_] : nullptr;
    }

   private:
    struct ScoreKey {
        int64_t score;
        uint32_t index;
    };

    size_t size() const {
        size_t n = tail_.size();
        for (const auto &run : frozen_) n += run->size();
        return n;
    }
    template <class Cmp>
    void sort_in_place(Cmp cmp) {
        flatten();
        if (tail_.size() < 2) return;  // already in order
        std::vector<const EdgeGroup *> &at = scratch_groups();
        const std::vector<ScoreKey> &keys = sort_keys(at, static_cast<unsigned>(tail_.size()), cmp);
        // Moved into a spare list that then trades places with this one, so
        // both buffers live on (this one in the spare) for the next sort.
        static thread_local std::vector<EdgeGroup> sorted;
        sorted.clear();
        sorted.reserve(tail_.size());
        for (const ScoreKey &key : keys) sorted.push_back(std::move(tail_[key.index]));
        tail_.swap(sorted);
        sorted.clear();
    }
    // Scratch for one sort at a time (sorts do not nest), kept per thread so
    // a sort allocates nothing once the lists have been this long before.
    static std::vector<const EdgeGroup *> &scratch_groups() {
        static thread_local std::vector<const EdgeGroup *> at;
        return at;
    }
    // Sets each group's share of k units, in order; returns how many groups it took.
    template <class GroupAt>
    static unsigned mark_needs(unsigned k, GroupAt group_at) {
        int to_select = static_cast<int>(k);
        unsigned i = 0;
        while (to_select > 0) {
            EdgeGroup &g = group_at(i++);
            g.needs = to_select <= static_cast<int>(g.count) ? static_cast<unsigned>(to_select) : g.count;
            to_select -= static_cast<int>(g.count);
        }
        return i;
    }
    void mark_prefix(unsigned k) {
        best_i_ = mark_needs(k, [this](unsigned i) -> EdgeGroup & { return tail_[i]; });
        whole_ = true;
        best_k_ = k;
    }
    void flatten() {
        if (frozen_.empty()) return;
        std::vector<EdgeGroup> all;
        all.reserve(size());
        for (const auto &run : frozen_) all.insert(all.end(), run->begin(), run->end());
        all.insert(all.end(), std::make_move_iterator(tail_.begin()), std::make_move_iterator(tail_.end()));
        tail_ = std::move(all);
        frozen_.clear();
    }
    // Every group's score in order, sorted as std::sort sorts the groups
    // (only the comparisons decide where elements go, so the keys land where
    // the groups would) far enough to cover k units; `at` maps key indexes to
    // groups.
    template <class Cmp>
    const std::vector<ScoreKey> &sort_keys(std::vector<const EdgeGroup *> &at, unsigned k, Cmp cmp) const {
        at.clear();
        at.reserve(size());
        for (const auto &run : frozen_)
            for (const EdgeGroup &g : *run) at.push_back(&g);
        for (const EdgeGroup &g : tail_) at.push_back(&g);
        static thread_local std::vector<ScoreKey> keys;
        keys.resize(at.size());
        auto fill = [&] {
            for (uint32_t i = 0; i < keys.size(); ++i) keys[i] = ScoreKey{at[i]->score, i};
        };
        auto by_score = [&cmp](const ScoreKey &a, const ScoreKey &b) { return cmp(a.score, b.score); };
        fill();
        sort_prefix(keys.begin(), keys.end(), static_cast<std::ptrdiff_t>(k), by_score);
        // Groups of no units leave the first k groups short of k units: sort
        // all of them, from the original order.
        uint64_t units = 0;
        for (size_t i = 0; i < keys.size() && i < k; ++i) units += at[keys[i].index]->count;
        if (units < k && k < keys.size()) {
            fill();
            sort_prefix(keys.begin(), keys.end(), static_cast<std::ptrdiff_t>(keys.size()), by_score);
        }
        return keys;
    }

    std::vector<std::shared_ptr<const std::vector<EdgeGroup>>> frozen_;  // earlier groups, shared
    std::vector<EdgeGroup> tail_;                                        // later groups, owned
    std::vector<EdgeGroup> chosen_;  // choose_best_k's choice, in order
    bool whole_ = false;             // choose_all sorted tail_ itself
    size_t iter_ = 0;
    bool iter_reset_ = true;
    int64_t cutline_ = 0;
    unsigned qual_ = 0;
    unsigned total_ = 0;
    unsigned best_k_ = 0;
    unsigned best_i_ = 0;
};

// Evals per resource type, in type order. A handful of types at most, so a
// sorted vector beats a tree. Cleared entries stay behind the live ones with
// their buffers, so a reused step allocates nothing for types seen before.
class EvalsByType {
   public:
    using value_type = std::pair<int, Evals>;
    using iterator = std::vector<value_type>::iterator;

    EvalsByType() = default;
    EvalsByType(const EvalsByType &o) : items_(o.begin(), o.end()), live_(o.live_) {}
    EvalsByType &operator=(const EvalsByType &o) {
        if (this != &o) {
            items_.assign(o.begin(), o.end());
            live_ = o.live_;
        }
        return *this;
    }
    EvalsByType(EvalsByType &&) noexcept = default;
    EvalsByType &operator=(EvalsByType &&) noexcept = default;

    Evals &operator[](int type) {
        auto it = lower(type);
        if (it != end() && it->first == type) return it->second;
        if (live_ == items_.size()) {
            it = items_.insert(it, value_type(type, Evals()));
        } else {
            // Bring a cleared entry from behind the live ones into place.
            auto spare = items_.begin() + static_cast<std::ptrdiff_t>(live_);
            spare->first = type;
            std::rotate(it, spare, spare + 1);
        }
        ++live_;
        return it->second;
    }
    size_t count(int type) const {
        for (auto it = begin(); it != end() && it->first <= type; ++it)
            if (it->first == type) return 1;
        return 0;
    }
    iterator begin() { return items_.begin(); }
    iterator end() { return items_.begin() + static_cast<std::ptrdiff_t>(live_); }
    std::vector<value_type>::const_iterator begin() const { return items_.begin(); }
    std::vector<value_type>::const_iterator end() const {
        return items_.begin() + static_cast<std::ptrdiff_t>(live_);
    }
    void clear() {
        for (auto it = begin(); it != end(); ++it) it->second.clear();
        live_ = 0;
    }

   private:
    std::vector<value_type> items_;  // [0, live_) in use, sorted by type; the rest cleared
    size_t live_ = 0;
    iterator lower(int type) {
        // A handful of entries: a scan beats a binary search.
        iterator it = begin(), stop = end();
        while (it != stop && it->first < type) ++it;
        return it;
    }
};

class Scoring {
   public:
    Evals &of(int type) { return by_type_[type]; }
    bool has(int type) const { return by_type_.count(type) > 0; }
    // Iterated in type order; adding a type while iterating is not allowed.
    EvalsByType &all() { return by_type_; }
    unsigned qualified_count(int type) { return by_type_[type].qualified_count(); }
    unsigned total_count(int type) { return by_type_[type].total_count(); }
    void add(int type, EdgeGroup g) { by_type_[type].add(std::move(g)); }

    template <class Cmp>
    void choose_accum_best_k(int type, unsigned k, Cmp cmp) {
        if (by_type_[type].choose_best_k(k, cmp)) hier_constrain_now = true;
    }
    template <class Cmp>
    void choose_accum_all(int type, Cmp cmp) {
        if (by_type_[type].choose_all(cmp)) hier_constrain_now = true;
    }
    // See Evals::freeze.
    void freeze() {
        for (auto &kv : by_type_) kv.second.freeze();
    }
    void merge(Scoring &&o) {
        for (auto &kv : o.by_type_) by_type_[kv.first].merge(std::move(kv.second));
    }

    // Back to a fresh step's state, keeping the buffers.
    void clear() {
        by_type_.clear();
        hier_constrain_now = false;
        overall_score = -1;
        avail = 0;
    }

    bool hier_constrain_now = false;
    int64_t overall_score = -1;
    unsigned avail = 0;

   private:
    EvalsByType by_type_;
};

// Scoring objects lent to the walk's steps and taken back when a step ends.
// A walk visits many vertices with the same few types; reusing the objects
// (and the candidate lists inside them) spares a heap block per list per step.
class ScoringPool {
   public:
    class Lease {
       public:
        explicit Lease(ScoringPool &pool) : pool_(pool), s_(pool.take()) {}
        ~Lease() { pool_.give(std::move(s_)); }
        Lease(const Lease &) = delete;
        Lease &operator=(const Lease &) = delete;
        Scoring &operator*() const { return *s_; }
        Scoring *operator->() const { return s_.get(); }

       private:
        ScoringPool &pool_;
        std::unique_ptr<Scoring> s_;
    };

   private:
    std::vector<std::unique_ptr<Scoring>> free_;
    std::unique_ptr<Scoring> take() {
        if (free_.empty()) return std::make_unique<Scoring>();
        std::unique_ptr<Scoring> s = std::move(free_.back());
        free_.pop_back();
        return s;
    }
    void give(std::unique_ptr<Scoring> s) noexcept {
        s->clear();
        try {
            free_.push_back(std::move(s));
        } catch (...) {  // out of memory: drop it rather than throw from a destructor
        }
    }
};

}  // namespace fluxion
