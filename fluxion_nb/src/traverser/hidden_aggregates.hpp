// Hidden aggregates: subtree totals of the pruning types a vertex's filter
// does not track, so a search skips subtrees that lack what it asks for.
//
// Fluxion's subtree filters count the types named by the prune spec; leaf
// types promoted at the root (cores under a rack, say) are counted nowhere
// below it, so a search for them walks every subtree to learn there is none.
// Each aggregate filter (PlannerMulti) also keeps those types, hidden:
// updated with every allocation like the others, never reported. A search
// may only use them when skipping a subtree cannot change what it says: a
// plain request (plain_request below) on a tree walked by the simple
// traverser. This object holds whether they are in use and reads them.
#pragma once
#include <cstdint>
#include <set>
#include <vector>

#include "planner/planner.hpp"
#include "traverser/job.hpp"
#include "util/type_counts.hpp"

namespace fluxion {

class HiddenAggregates {
   public:
    void set_enabled(bool on) { enabled_ = on; }
    // A new search for `rs` (`slot`: the slot type's id); `tree` when the
    // graph is a tree walked by the simple traverser.
    void begin(bool tree, const std::vector<Resource> &rs, int slot) {
        active_ = enabled_ && tree && plain_request(rs, slot);
    }
    bool active() const { return active_; }
    // They may only skip subtrees whose walk would have found nothing and
    // said nothing: not with jobspecs whose walk can stop on an error
    // (sibling resources of one type, an explicit non-exclusive request).
    static bool plain_request(const std::vector<Resource> &rs, int slot) {
        std::set<int> types;
        bool has_slot = false;
        for (const auto &r : rs) {
            if (r.exclusive == Tristate::False || !types.insert(r.type).second) return false;
            has_slot = has_slot || r.type == slot;
            if (!plain_request(r.with, slot)) return false;
        }
        return !has_slot || rs.size() == 1;
    }

    // Whether the hidden totals of `p` can hold request `need` (type ->
    // amount) during the job's window: None, or Range (more than the subtree
    // ever holds) or Busy (not free then).
    static MatchErr check(const JobMeta &m, const PlannerMulti &p, const TypeCounts &need) {
        for (size_t j = 0; j < p.hidden_size(); ++j) {
            auto it = need.find(p.hidden_type_at(j));
            if (it == need.end() || it->second <= 0) continue;
            const Planner &h = p.hidden_at(j);
            if (it->second > h.total()) return MatchErr::Range;
            if (m.alloc_type == AllocType::Satisfiability) continue;
            if (!h.fits_during(m.at, m.duration, it->second)) return MatchErr::Busy;
        }
        return MatchErr::None;
    }
    // The amounts of `counts` for `p`'s hidden types, in its order (scratch:
    // valid until the next call).
    const std::vector<int64_t> &amounts(const PlannerMulti &p, const TypeCounts &counts) {
        amounts_.resize(p.hidden_size());
        for (size_t j = 0; j < p.hidden_size(); ++j) amounts_[j] = counts.amount(p.hidden_type_at(j));
        return amounts_;
    }

   private:
    bool enabled_ = true;  // a shortcut (set_shortcuts)
    bool active_ = false;  // this search may use them
    std::vector<int64_t> amounts_;
};

}  // namespace fluxion
