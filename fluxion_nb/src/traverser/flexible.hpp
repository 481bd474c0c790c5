// The flexible traverser (flux-sched's `-T flexible`). Two jobspec forms
// the simple traverser refuses:
//  * or-slots: several `slot` entries side by side at one level. Under each
//    vertex where they fit, the matcher packs as many slots as it can, taking
//    whichever shape keeps the most slots possible (first listed on a tie);
//  * `xor_slot` entries: alternatives, of which exactly one is used. The
//    jobspec is expanded into one variant per combination of alternatives
//    (each xor_slot becoming a plain slot) and the variants are tried in
//    jobspec order; the first that matches wins, whatever the policy.
// The traverser's own hooks are Traverser::flex_* (defined in flexible.cpp);
// this header holds the pieces that do not need a graph.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "jobspec/jobspec.hpp"

namespace fluxion {

class TypeTable;

// At most this many variants from xor_slot alternatives (flux-sched's limit).
constexpr size_t kMaxXorVariants = 1000;

// Reader rules for one level of a jobspec read for the flexible traverser;
// throw InputError. A level may hold slots (or xor_slots) or other resources,
// not both: the traverser could never match such a level. Every slot needs a
// 'with' list.
void check_flexible_level(const std::vector<Resource> &level, const TypeTable &types, const std::string &where);
// The whole request must expand into at most kMaxXorVariants variants.
void check_xor_expansion(const std::vector<Resource> &resources, const TypeTable &types);

bool contains_xor_slot(const std::vector<Resource> &resources, int xor_slot_type);

// The variants of `resources`, in the order they are tried: non-xor siblings
// are all kept (cross product of their own variants), and one of the level's
// xor_slot alternatives, turned into a `slot`, is appended. Empty when there
// would be more than `limit` variants.
std::vector<std::vector<Resource>> split_xor_slots(const std::vector<Resource> &resources, int slot_type,
                                                   int xor_slot_type, size_t limit = kMaxXorVariants);

// Which or-slot shapes to cut, and in which order, from the units a vertex
// offers per type. With one shape: as many as fit, capped at the slot count.
// With several: the sequence that packs the most slots (uncapped), found by
// a search over what is left after each choice; ties go to the shape listed
// first.
class OrSlotPlanner {
   public:
    // calc_count(resource, available) -> units a shape takes of that type (0: does not fit).
    using CountFn = std::function<unsigned(const Resource &, unsigned)>;

    OrSlotPlanner(const std::vector<Resource> &slots, unsigned nslots, CountFn calc_count,
                  size_t max_states = 100000);

    // Indexes into `slots`, one per slot to cut. False when the search would
    // visit more than max_states distinct remainders (nothing is planned).
    bool plan(const std::map<int, int64_t> &available, std::vector<int> &order);

   private:
    using Units = std::map<int, int64_t>;
    struct Choice {
        Units rest;           // what is left after this choice
        int64_t slots = 0;    // slots packable from here
        int index = -1;       // shape cut first
    };
    const std::vector<Resource> &slots_;
    unsigned nslots_;
    CountFn calc_count_;
    size_t max_states_;
    std::map<Units, Choice> memo_;

    Choice one_shape(const Units &avail) const;
    bool takes(const Resource &slot, const Units &avail, Units &rest) const;
    bool search(const Units &root);
};

}  // namespace fluxion
