// Small sorted maps and sets of plain values, one pointer wide and stored in
// one heap block (none while empty). A vertex keeps several per-job tables
// (allocations, tags, spans); most hold zero or one job, and a node-wide
// allocation fills them for every vertex below the node, so a table costs
// one allocation at most instead of one per entry. A table's first block,
// with room for one entry, comes from a pool (block_pool.hpp): a placement
// gives many vertices their first entry at once.
#pragma once
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <type_traits>
#include <utility>

#include "util/block_pool.hpp"

namespace fluxion {

namespace detail {

// Entries sorted by `key(entry)`, in a block laid out as
// [uint32 size][uint32 capacity][entries...].
template <class Entry, class Key>
class FlatTable {
    static_assert(std::is_trivially_copyable_v<Entry>, "entries are moved with memcpy");

   public:
    using iterator = Entry *;
    using const_iterator = const Entry *;

    FlatTable() = default;
    FlatTable(const FlatTable &o) { copy_from(o); }
    FlatTable &operator=(const FlatTable &o) {
        if (this != &o) {
            clear();
            copy_from(o);
        }
        return *this;
    }
    FlatTable(FlatTable &&o) noexcept : b_(o.b_) { o.b_ = nullptr; }
    FlatTable &operator=(FlatTable &&o) noexcept {
        if (this != &o) {
            clear();
            b_ = o.b_;
            o.b_ = nullptr;
        }
        return *this;
    }
    ~FlatTable() { release(); }

    bool empty() const { return size() == 0; }
    size_t size() const { return b_ ? head()->size : 0; }
    iterator begin() { return data(); }
    iterator end() { return data() + size(); }
    const_iterator begin() const { return data(); }
    const_iterator end() const { return data() + size(); }

    iterator find(const Key &k) {
        iterator it = lower(k);
        return it != end() && Entry::key(*it) == k ? it : end();
    }
    const_iterator find(const Key &k) const { return const_cast<FlatTable *>(this)->find(k); }
    size_t count(const Key &k) const { return find(k) != end() ? 1 : 0; }

    iterator erase(iterator it) {
        size_t i = static_cast<size_t>(it - data());
        size_t n = size();
        std::memmove(static_cast<void *>(data() + i), data() + i + 1, (n - i - 1) * sizeof(Entry));
        head()->size = static_cast<uint32_t>(n - 1);
        if (n == 1) clear();  // an emptied table gives its block back
        return b_ ? data() + i : nullptr;
    }
    size_t erase(const Key &k) {
        iterator it = find(k);
        if (it == end()) return 0;
        erase(it);
        return 1;
    }
    void clear() {
        release();
        b_ = nullptr;
    }
    // Free first blocks for `n` tables to come (see block_pool.hpp).
    static void reserve_first_blocks(size_t n) { reserve_blocks<kFirstBlock>(n); }

   protected:
    // The entry for `k`, inserted as `fresh` if absent; `inserted` says which.
    Entry &emplace(const Key &k, const Entry &fresh, bool &inserted) {
        iterator it = lower(k);
        if (it != end() && Entry::key(*it) == k) {
            inserted = false;
            return *it;
        }
        size_t i = static_cast<size_t>(it - data());
        size_t n = size();
        reserve(n + 1);
        std::memmove(static_cast<void *>(data() + i + 1), data() + i, (n - i) * sizeof(Entry));
        data()[i] = fresh;
        head()->size = static_cast<uint32_t>(n + 1);
        inserted = true;
        return data()[i];
    }

   private:
    struct Head {
        uint32_t size;
        uint32_t cap;
    };
    static constexpr size_t kOffset = alignof(Entry) > sizeof(Head) ? alignof(Entry) : sizeof(Head);
    void *b_ = nullptr;

    // A block with room for one entry: taken from the pool, never resized.
    static constexpr size_t kFirstBlock = kOffset + sizeof(Entry);
    Head *head() const { return static_cast<Head *>(b_); }
    void release() noexcept {
        if (!b_) return;
        if (head()->cap == 1)
            give_block<kFirstBlock>(b_);
        else
            std::free(b_);
    }
    Entry *data() const {
        return b_ ? reinterpret_cast<Entry *>(static_cast<char *>(b_) + kOffset) : nullptr;
    }
    iterator lower(const Key &k) {
        // Keys mostly arrive in increasing order (job ids): check the back first.
        size_t n = size();
        Entry *d = data();
        if (n == 0 || Entry::key(d[n - 1]) < k) return d + n;
        size_t lo = 0, hi = n;
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            if (Entry::key(d[mid]) < k)
                lo = mid + 1;
            else
                hi = mid;
        }
        return d + lo;
    }
    void reserve(size_t n) {
        size_t cap = b_ ? head()->cap : 0;
        if (n <= cap) return;
        if (n == 1) {
            b_ = take_block<kFirstBlock>();
            *head() = Head{0, 1};
            return;
        }
        size_t ncap = cap == 0 ? n : cap * 2;
        if (ncap < n) ncap = n;
        void *nb;
        if (cap == 1) {
            // Out of the pool's block into one that can grow.
            nb = std::malloc(kOffset + ncap * sizeof(Entry));
            if (!nb) throw std::bad_alloc();
            std::memcpy(nb, b_, kFirstBlock);
            give_block<kFirstBlock>(b_);
        } else {
            nb = std::realloc(b_, kOffset + ncap * sizeof(Entry));
            if (!nb) throw std::bad_alloc();
            if (!b_) static_cast<Head *>(nb)->size = 0;
        }
        b_ = nb;
        head()->cap = static_cast<uint32_t>(ncap);
    }
    void copy_from(const FlatTable &o) {
        size_t n = o.size();
        if (n == 0) return;
        reserve(n);
        std::memcpy(static_cast<void *>(data()), o.data(), n * sizeof(Entry));
        head()->size = static_cast<uint32_t>(n);
    }
};

template <class K, class V>
struct MapEntry {
    K first;
    V second;
    static const K &key(const MapEntry &e) { return e.first; }
};

template <class K>
struct SetEntry {
    K value;
    static const K &key(const SetEntry &e) { return e.value; }
};

}  // namespace detail

template <class K, class V>
class FlatMap : public detail::FlatTable<detail::MapEntry<K, V>, K> {
    using Base = detail::FlatTable<detail::MapEntry<K, V>, K>;

   public:
    using key_type = K;
    using mapped_type = V;
    V &operator[](const K &k) {
        bool inserted;
        return Base::emplace(k, detail::MapEntry<K, V>{k, V{}}, inserted).second;
    }
};

template <class K>
class FlatSet : public detail::FlatTable<detail::SetEntry<K>, K> {
    using Base = detail::FlatTable<detail::SetEntry<K>, K>;

   public:
    using key_type = K;
    bool insert(const K &k) {
        bool inserted;
        Base::emplace(k, detail::SetEntry<K>{k}, inserted);
        return inserted;
    }
};

}  // namespace fluxion
