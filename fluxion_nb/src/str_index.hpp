// An open-addressing index from strings to small integer ids (vertex or
// pending-vertex numbers). The keys are not stored: `KeyOf` gives the key of
// an id back, so a slot is 8 bytes (the key's 32-bit hash and the id), a
// lookup touches one cache line of slots instead of a chain of separately
// allocated nodes, and growing never reads a key.
#pragma once
#include <cstdint>
#include <functional>
#include <string_view>
#include <utility>
#include <vector>

namespace fluxion {

namespace detail {
struct IndexSlot {
    uint32_t tag = 0;  // the key's hash: picks the home slot, skips most key comparisons
    int32_t id = -1;   // -1: empty
};
}  // namespace detail

template <class KeyOf>
class StrIndex {
   public:
    explicit StrIndex(KeyOf key_of = KeyOf()) : key_of_(std::move(key_of)) {}

    size_t size() const { return size_; }
    bool empty() const { return size_ == 0; }
    void clear() {
        slots_.clear();
        size_ = 0;
    }
    // Room for `n` keys without growing.
    void reserve(size_t n) {
        if (n * 2 > slots_.size()) rehash(n * 2);
    }

    // The id of `key`, or -1.
    int find(std::string_view key) const {
        if (slots_.empty()) return -1;
        uint32_t h = hash(key);
        for (size_t i = h & mask(); slots_[i].id >= 0; i = (i + 1) & mask())
            if (slots_[i].tag == h && key_of_(slots_[i].id) == key) return slots_[i].id;
        return -1;
    }
    // Adds `key` -> `id` unless the key is present; returns the id in force.
    // Only ids already in the index are looked up, so `key_of(id)` for the
    // new id may start to work right after the call.
    int insert(std::string_view key, int id) { return put(key, id, false); }
    // Point the key at `id`, whether or not it was present.
    void assign(std::string_view key, int id) { put(key, id, true); }
    // Take over another index over the same keys and ids (its key_of must
    // give the same strings as ours).
    template <class K>
    void adopt(StrIndex<K> &&o) {
        slots_ = std::move(o.slots_);
        size_ = o.size_;
        o.clear();
    }
    void erase(std::string_view key) {
        if (slots_.empty()) return;
        uint32_t h = hash(key);
        size_t i = h & mask();
        for (;; i = (i + 1) & mask()) {
            if (slots_[i].id < 0) return;
            if (slots_[i].tag == h && key_of_(slots_[i].id) == key) break;
        }
        // Backward-shift deletion keeps every probe run unbroken.
        size_t hole = i;
        for (size_t j = (i + 1) & mask(); slots_[j].id >= 0; j = (j + 1) & mask()) {
            size_t home = slots_[j].tag & mask();
            // Move j into the hole when its home is not in (hole, j].
            bool movable = hole <= j ? (home <= hole || home > j) : (home <= hole && home > j);
            if (movable) {
                slots_[hole] = slots_[j];
                hole = j;
            }
        }
        slots_[hole] = Slot{};
        --size_;
    }

   private:
    template <class>
    friend class StrIndex;
    using Slot = detail::IndexSlot;
    std::vector<Slot> slots_;  // power-of-two size, at most half full
    size_t size_ = 0;
    KeyOf key_of_;

    size_t mask() const { return slots_.size() - 1; }
    static uint32_t hash(std::string_view s) {
        uint64_t h = std::hash<std::string_view>{}(s);
        return static_cast<uint32_t>(h ^ (h >> 32));
    }
    int put(std::string_view key, int id, bool overwrite) {
        if ((size_ + 1) * 2 > slots_.size()) rehash(slots_.empty() ? 16 : slots_.size() * 2);
        uint32_t h = hash(key);
        size_t i = h & mask();
        for (; slots_[i].id >= 0; i = (i + 1) & mask())
            if (slots_[i].tag == h && key_of_(slots_[i].id) == key) {
                if (overwrite) slots_[i].id = id;
                return slots_[i].id;
            }
        slots_[i] = Slot{h, id};
        ++size_;
        return id;
    }
    void rehash(size_t want) {
        size_t cap = 16;
        while (cap < want) cap *= 2;
        std::vector<Slot> old = std::move(slots_);
        slots_.assign(cap, Slot{});
        for (const Slot &s : old) {
            if (s.id < 0) continue;
            size_t i = s.tag & mask();
            while (slots_[i].id >= 0) i = (i + 1) & mask();
            slots_[i] = s;
        }
    }
};

}  // namespace fluxion
