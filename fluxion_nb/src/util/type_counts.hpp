// Amounts per resource type: what a subtree holds or a request asks, summed
// per type on the way up a walk. A walk keeps one per vertex it passes, and
// a graph has a handful of types, so the entries live inline (no heap block
// for up to kInline types), sorted by type like the std::map they replace.
#pragma once
#include <algorithm>
#include <cstdint>

#include "util/small_vec.hpp"

namespace fluxion {

struct TypeCount {
    int first;       // resource type id
    int64_t second;  // amount
};

class TypeCounts {
   public:
    static constexpr size_t kInline = 6;
    using iterator = TypeCount *;
    using const_iterator = const TypeCount *;

    int64_t &operator[](int type) {
        TypeCount *it = lower(type);
        if (it == items_.end() || it->first != type) it = items_.insert(it, TypeCount{type, 0});
        return it->second;
    }
    iterator find(int type) {
        TypeCount *it = lower(type);
        return it != items_.end() && it->first == type ? it : items_.end();
    }
    const_iterator find(int type) const { return const_cast<TypeCounts *>(this)->find(type); }
    size_t count(int type) const { return find(type) != end() ? 1 : 0; }
    // The amount of `type`; a type never counted holds none.
    int64_t amount(int type) const {
        const_iterator it = find(type);
        return it != end() ? it->second : 0;
    }

    iterator begin() { return items_.begin(); }
    iterator end() { return items_.end(); }
    const_iterator begin() const { return items_.begin(); }
    const_iterator end() const { return items_.end(); }
    size_t size() const { return items_.size(); }
    bool empty() const { return items_.empty(); }
    void clear() { items_.clear(); }

   private:
    SmallVec<TypeCount, kInline> items_;
    TypeCount *lower(int type) {
        return std::lower_bound(items_.begin(), items_.end(), type,
                                [](const TypeCount &c, int t) { return c.first < t; });
    }
};

}  // namespace fluxion
