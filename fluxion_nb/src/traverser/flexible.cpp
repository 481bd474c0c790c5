#include "traverser/flexible.hpp"

#include <algorithm>
#include <climits>

#include "util/errors.hpp"
#include "graph/graph.hpp"
#include "traverser/traverser.hpp"

namespace fluxion {

namespace {

[[noreturn]] void bad(const std::string &where, const std::string &what) {
    throw InputError("jobspec: " + where + ": " + what);
}

bool is_slot_like(const Resource &r, const TypeTable &types) {
    return r.type == types.slot || r.type == types.xor_slot;
}

// Variants of one level, saturating just above `limit`.
size_t count_variants(const std::vector<Resource> &level, int xor_slot_type, size_t limit) {
    auto cap = [limit](size_t n) { return std::min(n, limit + 1); };
    size_t base = 1, alternatives = 0;
    for (const auto &r : level) {
        size_t own = count_variants(r.with, xor_slot_type, limit);
        if (r.type == xor_slot_type)
            alternatives = cap(alternatives + own);
        else
            base = cap(base * own);
    }
    return alternatives == 0 ? base : cap(base * alternatives);
}

}  // namespace

void check_flexible_level(const std::vector<Resource> &level, const TypeTable &types, const std::string &where) {
    bool slots = false;
    std::string other;
    for (const auto &r : level) {
        if (is_slot_like(r, types)) {
            slots = true;
            if (r.with.empty())
                bad(where, types.name(r.type) + " '" + r.label +
                               "' needs a 'with' list (the resources of one slot)");
        } else if (other.empty()) {
            other = types.name(r.type);
        }
    }
    // A vertex of that type would be claimed both as itself and as the level
    // of the slots, which the traverser refuses: the level could never match.
    if (slots && !other.empty())
        bad(where, "'" + other +
                       "' beside slots at one level; the flexible traverser takes a level either as "
                       "alternative slots or as resources, so move '" +
                       other + "' into the slots or the slots under it");
}

void check_xor_expansion(const std::vector<Resource> &resources, const TypeTable &types) {
    if (count_variants(resources, types.xor_slot, kMaxXorVariants) > kMaxXorVariants)
        bad("resources", "the xor_slot alternatives combine into more than " + std::to_string(kMaxXorVariants) +
                             " variants");
}

bool contains_xor_slot(const std::vector<Resource> &resources, int xor_slot_type) {
    return std::any_of(resources.begin(), resources.end(), [&](const Resource &r) {
        return r.type == xor_slot_type || contains_xor_slot(r.with, xor_slot_type);
    });
}

std::vector<std::vector<Resource>> split_xor_slots(const std::vector<Resource> &resources, int slot_type,
                                                   int xor_slot_type, size_t limit) {
    // Required siblings multiply; the level's alternatives are gathered and
    // one of them is appended to each combination of the required ones.
    std::vector<std::vector<Resource>> required(1);
    std::vector<Resource> alternatives;
    for (const auto &r : resources) {
        auto own = split_xor_slots(r.with, slot_type, xor_slot_type, limit);
        if (own.empty()) return {};
        if (r.type == xor_slot_type) {
            for (auto &w : own) {
                Resource option = r;
                option.type = slot_type;
                option.with = std::move(w);
                alternatives.push_back(std::move(option));
                if (alternatives.size() > limit) return {};
            }
            continue;
        }
        std::vector<std::vector<Resource>> next;
        for (const auto &prefix : required) {
            for (const auto &w : own) {
                Resource kept = r;
                kept.with = w;
                next.push_back(prefix);
                next.back().push_back(std::move(kept));
                if (next.size() > limit) return {};
            }
        }
        required = std::move(next);
    }
    if (alternatives.empty()) return required;
    std::vector<std::vector<Resource>> out;
    for (const auto &prefix : required) {
        for (const auto &option : alternatives) {
            out.push_back(prefix);
            out.back().push_back(option);
            if (out.size() > limit) return {};
        }
    }
    return out;
}

// ---------------------------------------------------------------- OrSlotPlanner

OrSlotPlanner::OrSlotPlanner(const std::vector<Resource> &slots, unsigned nslots, CountFn calc_count,
                             size_t max_states)
    : slots_(slots), nslots_(nslots), calc_count_(std::move(calc_count)), max_states_(max_states) {}

namespace {
// What calc_count sees of a remainder: never below zero (a shape listing a
// type twice can overdraw it) nor above the unsigned range.
unsigned as_available(int64_t n) {
    if (n < 0) return 0;
    return n > static_cast<int64_t>(UINT_MAX) ? UINT_MAX : static_cast<unsigned>(n);
}
}  // namespace

OrSlotPlanner::Choice OrSlotPlanner::one_shape(const Units &avail) const {
    int64_t fit = nslots_;
    for (const auto &elem : slots_[0].with) {
        int64_t have = avail.at(elem.type);
        unsigned count = calc_count_(elem, as_available(have));
        if (count == 0 || have < static_cast<int64_t>(count)) return Choice{avail, 0, 0};
        fit = std::min(fit, have / static_cast<int64_t>(count));
    }
    return Choice{avail, fit, 0};
}

bool OrSlotPlanner::takes(const Resource &slot, const Units &avail, Units &rest) const {
    rest = avail;
    for (const auto &elem : slot.with) {
        unsigned count = calc_count_(elem, as_available(avail.at(elem.type)));
        if (count == 0) return false;
        rest[elem.type] -= count;
    }
    return true;
}

bool OrSlotPlanner::search(const Units &root) {
    // Depth-first over remainders with memoised results; an explicit stack
    // because a remainder can be many slots deep.
    struct Frame {
        Units units;
        size_t next = 0;
        int64_t best = -1;
        bool waiting = false;
        Units pending;
        int pending_index = -1;
    };
    auto consider = [this](Frame &f, const Units &rest, int index, int64_t slots) {
        if (f.best < slots) {
            f.best = slots;
            memo_[f.units] = Choice{rest, slots + 1, index};
        }
    };
    auto frame = [](Units units) {
        Frame f;
        f.units = std::move(units);
        return f;
    };
    if (memo_.count(root)) return true;
    std::vector<Frame> stack;
    stack.push_back(frame(root));
    while (!stack.empty()) {
        size_t top = stack.size() - 1;
        if (stack[top].waiting) {
            stack[top].waiting = false;
            consider(stack[top], stack[top].pending, stack[top].pending_index,
                     memo_.at(stack[top].pending).slots);
        }
        bool descended = false;
        while (stack[top].next < slots_.size()) {
            int i = static_cast<int>(stack[top].next++);
            Units rest;
            if (!takes(slots_[static_cast<size_t>(i)], stack[top].units, rest)) continue;
            auto known = memo_.find(rest);
            if (known != memo_.end()) {
                consider(stack[top], rest, i, known->second.slots);
                continue;
            }
            if (memo_.size() + stack.size() >= max_states_) return false;
            stack[top].pending = rest;
            stack[top].pending_index = i;
            stack[top].waiting = true;
            stack.push_back(frame(std::move(rest)));
            descended = true;
            break;
        }
        if (descended) continue;
        if (stack[top].best < 0) memo_[stack[top].units] = Choice{Units{}, 0, -1};
        stack.pop_back();
    }
    return true;
}

bool OrSlotPlanner::plan(const std::map<int, int64_t> &available, std::vector<int> &order) {
    order.clear();
    memo_.clear();
    if (slots_.empty()) return true;
    if (slots_.size() == 1) {
        Choice c = one_shape(available);
        order.assign(static_cast<size_t>(std::max<int64_t>(c.slots, 0)), 0);
        return true;
    }
    if (!search(available)) return false;
    Choice c = memo_.at(available);
    for (int64_t k = c.slots; k > 0; --k) {
        order.push_back(c.index);
        auto it = memo_.find(c.rest);
        if (it == memo_.end()) break;
        c = it->second;
    }
    return true;
}

// ---------------------------------------------------------------- Traverser hooks

void Traverser::flex_prime_jobspec(std::vector<Resource> &resources, TypeCounts &to_parent) {
    // Alternatives must not make a subtree look too small: what a level of
    // slots needs is the least any one of them needs, and a type some slot
    // does without counts as not needed at all.
    auto min_if = [this](int type, int64_t count, TypeCounts &acc) {
        if (!is_pruning_type(type)) return;
        auto it = acc.find(type);
        if (it == acc.end())
            acc[type] = count;
        else if (it->second > count)
            it->second = count;
    };
    for (auto &r : resources) {
        if (r.exclusive == Tristate::True) x_types_.insert(r.type);
        accum_if(r.type, r.count.min, to_parent);
        r.user_data.clear();
        flex_prime_jobspec(r.with, r.user_data);
        if (r.type == g_.types.slot || r.type == g_.types.xor_slot) {
            for (const auto &kv : r.user_data)
                min_if(kv.first, static_cast<int64_t>(r.count.min) * kv.second, to_parent);
            for (auto &kv : to_parent)
                if (!r.user_data.count(kv.first)) min_if(kv.first, 0, to_parent);
        } else {
            for (const auto &kv : r.user_data)
                accum_if(kv.first, static_cast<int64_t>(r.count.min) * kv.second, to_parent);
        }
    }
}

bool Traverser::flex_prune_resources(const JobMeta &m, bool excl, int u, const std::vector<Resource> &rs) {
    // A slot whose aggregate does not fit here does not prune the vertex by
    // itself (another slot of the level may fit); the last resource checked
    // decides, as in flux-sched.
    bool keep = true;
    MatchErr before = errno_;
    for (const auto &r : rs) {
        if (type_of(u) != r.type && r.type != g_.types.slot) continue;
        if (r.type != g_.types.slot) {
            if (!by_excl(m, u, excl, r) || !by_subplan(m, u, r)) return false;
            keep = true;
        } else {
            keep = by_subplan(m, u, r);
        }
    }
    if (keep) errno_ = before;
    return keep;
}

bool Traverser::slot_match(int u, const Resource &slot) {
    for (const auto &c : slot.with) {
        bool found = false;
        for (int e : V(u).out_edges)
            if (type_of(E(e).target) == c.type) {
                found = true;
                break;
            }
        if (!found) return false;
    }
    return true;
}

const std::vector<Resource> &Traverser::flex_test(int u, const std::vector<Resource> &rs, bool &pristine,
                                                  unsigned &nslots, MatchKind &kind) {
    const Resource *match = nullptr;
    const std::vector<Resource> *slots = nullptr;
    bool matched = false, or_matched = false;
    int t = type_of(u);
    for (const auto &r : rs) {
        if (t == r.type) {
            if (matched || or_matched) {
                err_msg_ += "test: siblings in jobspec request same resource type : " + g_.types.name(t) + ".\n";
                kind = MatchKind::None;
                return rs;
            }
            match = &r;
            for (const auto &c : r.with)
                if (c.type == g_.types.slot) {
                    slots = &r.with;
                    nslots = effective_max(c);
                }
            matched = true;
        } else if (r.type == g_.types.slot) {
            if (matched) {
                err_msg_ += "test: siblings in jobspec request same resource type : " + g_.types.name(t) + ".\n";
                kind = MatchKind::None;
                return rs;
            }
            // With several or-slots the last one listed sets the slot count.
            slots = &rs;
            nslots = effective_max(r);
            or_matched = true;
        }
    }
    if (slots) {
        kind = pristine ? MatchKind::PristineNone : MatchKind::None;
        const std::vector<Resource> *next = &rs;
        for (const auto &r : *slots)
            if (slot_match(u, r)) {
                kind = MatchKind::Slot;
                pristine = false;
                next = slots;
            }
        return *next;
    }
    if (match) {
        kind = MatchKind::Resource;
        pristine = false;
        return match->with;
    }
    kind = pristine ? MatchKind::PristineNone : MatchKind::None;
    return rs;
}

int Traverser::flex_dom_slot(const JobMeta &m, int u, const std::vector<Resource> &slots, unsigned nslots,
                             bool pristine, Scoring &dfu) {
    // Explore once for the union of the shapes' types, each at the largest
    // count any shape asks (so first-match exploration finds enough), then
    // cut the planned shapes out of the candidates in policy order.
    std::map<int, const Resource *> widest;
    for (const auto &slot : slots)
        for (const auto &r : slot.with) {
            auto it = widest.find(r.type);
            if (it == widest.end())
                widest.emplace(r.type, &r);
            else if (it->second->count.min < r.count.min)
                it->second = &r;
        }
    std::vector<Resource> shape_union;
    for (const auto &kv : widest) shape_union.push_back(*kv.second);

    bool x_inout = true;
    ScoringPool::Lease slot_lease(scoring_pool_);
    Scoring &dfu_slot = *slot_lease;
    if (explore(m, u, shape_union, pristine, &x_inout, dfu_slot, nslots) != 0) return -1;
    finish_slot(dfu_slot);
    std::map<int, int64_t> available;
    for (const auto &kv : widest) available[kv.first] = dfu_slot.qualified_count(kv.first);

    OrSlotPlanner planner(slots, nslots, [this](const Resource &r, unsigned qc) { return calc_count(r, qc); });
    std::vector<int> order;
    if (!planner.plan(available, order)) {
        err_msg_ += "dom_slot: too many ways to pack the or-slots under " + std::string(V(u).name) + ".\n";
        return -1;
    }
    std::vector<EdgeGroup> cut;
    SlotCursor cursor;
    for (int index : order) {
        EdgeGroup slot;
        if (!cut_slot(slots[static_cast<size_t>(index)].with, dfu_slot, cursor, slot)) return -1;
        cut.push_back(std::move(slot));
    }
    for (auto &s : cut) dfu.add(g_.types.slot, std::move(s));
    return cut.empty() ? -1 : 0;
}

bool Traverser::flex_select(std::vector<Resource> &rs, int root, JobMeta &m, bool excl) {
    if (!contains_xor_slot(rs, g_.types.xor_slot)) return select_tree(rs, root, m, excl);
    auto variants = split_xor_slots(rs, g_.types.slot, g_.types.xor_slot);
    if (variants.empty()) {
        errno_ = MatchErr::Invalid;
        err_msg_ += "select: the xor_slot alternatives combine into more than " +
                    std::to_string(kMaxXorVariants) + " variants.\n";
        return false;
    }
    // Jobspec order decides between alternatives; the policy only ranks
    // placements of one variant.
    for (auto &variant : variants) {
        if (select_tree(variant, root, m, excl)) {
            rs = std::move(variant);
            return true;
        }
    }
    return false;
}

}  // namespace fluxion
