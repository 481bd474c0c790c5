// Candidate bookkeeping for one step of the depth-first match: for each
// resource type, the groups of child edges that could satisfy it, their
// scores, and which of them the policy chose.
#pragma once
#include <algorithm>
#include <cstdint>
#include <map>
#include <vector>

#include "small_vec.hpp"

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
        groups_.push_back(std::move(g));
    }
    void merge(Evals &&o) {
        qual_ += o.qual_;
        total_ += o.total_;
        if (groups_.empty())
            groups_ = std::move(o.groups_);
        else
            groups_.insert(groups_.end(), std::make_move_iterator(o.groups_.begin()),
                           std::make_move_iterator(o.groups_.end()));
    }
    unsigned qualified_count() const { return qual_; }
    unsigned total_count() const { return total_; }
    unsigned best_k() const { return best_k_; }
    unsigned best_i() const { return best_i_; }
    const std::vector<EdgeGroup> &groups() const { return groups_; }
    std::vector<EdgeGroup> &groups() { return groups_; }

    // Sort by score (descending when `high`) and mark the first k units.
    template <class Cmp>
    bool choose_best_k(unsigned k, Cmp cmp) {
        if (k == 0 || k > qual_) return false;
        sort_groups(cmp);
        int to_select = static_cast<int>(k);
        unsigned i = 0;
        while (to_select > 0) {
            EdgeGroup &g = groups_[i];
            g.needs = to_select <= static_cast<int>(g.count) ? static_cast<unsigned>(to_select) : g.count;
            to_select -= static_cast<int>(g.count);
            ++i;
        }
        best_k_ = k;
        best_i_ = i;
        return true;
    }

    // Iteration used to cut slots out of candidates.
    void iter_reset() { iter_reset_ = true; }
    EdgeGroup *iter_next() {
        if (iter_reset_) {
            iter_ = 0;
            iter_reset_ = false;
        } else if (iter_ < groups_.size()) {
            ++iter_;
        }
        return iter_ < groups_.size() ? &groups_[iter_] : nullptr;
    }

   private:
    // std::sort over positions, then one move per group. The order is the one
    // std::sort gives the groups themselves (same comparisons, same moves:
    // flux-sched's ties fall the same way) without swapping whole groups, which
    // dominated matching on graphs of many pooled nodes.
    template <class Cmp>
    void sort_groups(Cmp cmp) {
        std::vector<uint32_t> order(groups_.size());
        for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
        std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return cmp(groups_[a], groups_[b]); });
        std::vector<EdgeGroup> sorted;
        sorted.reserve(groups_.size());
        for (uint32_t i : order) sorted.push_back(std::move(groups_[i]));
        groups_ = std::move(sorted);
    }

    std::vector<EdgeGroup> groups_;
    size_t iter_ = 0;
    bool iter_reset_ = true;
    int64_t cutline_ = 0;
    unsigned qual_ = 0;
    unsigned total_ = 0;
    unsigned best_k_ = 0;
    unsigned best_i_ = 0;
};

// Evals per resource type, in type order. A handful of types at most, so a
// sorted vector beats a tree: no allocation per type and per visit.
class EvalsByType {
   public:
    using value_type = std::pair<int, Evals>;
    Evals &operator[](int type) {
        auto it = lower(type);
        if (it == items_.end() || it->first != type) it = items_.insert(it, value_type(type, Evals()));
        return it->second;
    }
    size_t count(int type) const {
        auto it = const_cast<EvalsByType *>(this)->lower(type);
        return it != items_.end() && it->first == type ? 1 : 0;
    }
    std::vector<value_type>::iterator begin() { return items_.begin(); }
    std::vector<value_type>::iterator end() { return items_.end(); }

   private:
    std::vector<value_type> items_;
    std::vector<value_type>::iterator lower(int type) {
        return std::lower_bound(items_.begin(), items_.end(), type,
                                [](const value_type &v, int t) { return v.first < t; });
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
        Evals &e = by_type_[type];
        if (e.choose_best_k(e.qualified_count(), cmp)) hier_constrain_now = true;
    }
    void merge(Scoring &&o) {
        for (auto &kv : o.by_type_) by_type_[kv.first].merge(std::move(kv.second));
    }

    bool hier_constrain_now = false;
    int64_t overall_score = -1;
    unsigned avail = 0;

   private:
    EvalsByType by_type_;
};

}  // namespace fluxion
