// An open-addressing index from strings to small integer ids (vertex or
// pending-vertex numbers). The keys are not stored: `KeyOf` gives the key of
// an id back, so a slot is 8 bytes (the key's 32-bit hash and the id), a
// lookup touches one cache line of slots instead of a chain of separately
// allocated nodes, and growing never reads a key.
#pragma once
#include <cstdint>
#include <cstring>
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
    // Starts loading the slot a lookup of `key` begins at, so that a find
    // or insert of it a little later need not wait for memory.
    void prefetch(std::string_view key) const {
        if (slots_.empty()) return;
        const Slot *slot = &slots_[hash(key) & mask()];
        __builtin_prefetch(slot);
        // GCC finds a function whose only effect is a prefetch pure, and
        // drops calls to it; an empty asm that takes the address is kept.
        asm volatile("" : : "r"(slot));
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
    // Eight bytes a step, each folded in with a multiply and a shift; the
    // last word overlaps the one before it instead of going byte by byte.
    static uint32_t hash(std::string_view s) {
        const char *p = s.data();
        size_t n = s.size();
        uint64_t h = 0x9E3779B97F4A7C15ull ^ n;
        auto mix = [&h](uint64_t w) {
            h = (h ^ w) * 0xBF58476D1CE4E5B9ull;
            h ^= h >> 31;
        };
        if (n >= 8) {
            for (; n > 8; p += 8, n -= 8) mix(load8(p));
            mix(load8(p + n - 8));
        } else {
            uint64_t w = 0;
            for (size_t i = 0; i < n; ++i) w |= static_cast<uint64_t>(static_cast<unsigned char>(p[i])) << (8 * i);
            mix(w);
        }
        h *= 0x94D049BB133111EBull;
        return static_cast<uint32_t>(h ^ (h >> 32));
    }
    static uint64_t load8(const char *p) {
        uint64_t w;
        std::memcpy(&w, p, 8);
        return w;
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
