// A vector of plain values that keeps its first N elements inline and moves
// to the heap only beyond them: a planner's few time points and spans then
// live in the planner's own block.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <type_traits>

namespace fluxion {

template <class T, size_t N>
class SmallVec {
    static_assert(std::is_trivially_copyable_v<T>, "elements are moved with memcpy");

   public:
    SmallVec() = default;
    SmallVec(const SmallVec &o) { assign(o); }
    SmallVec &operator=(const SmallVec &o) {
        if (this != &o) {
            size_ = 0;
            assign(o);
        }
        return *this;
    }
    SmallVec(SmallVec &&o) noexcept { take(o); }
    SmallVec &operator=(SmallVec &&o) noexcept {
        if (this != &o) {
            if (on_heap()) std::free(data_);
            data_ = inline_data();
            cap_ = N;
            take(o);
        }
        return *this;
    }
    ~SmallVec() {
        if (on_heap()) std::free(data_);
    }

    size_t size() const { return size_; }
    bool empty() const { return size_ == 0; }
    T *begin() { return data_; }
    T *end() { return data_ + size_; }
    const T *begin() const { return data_; }
    const T *end() const { return data_ + size_; }
    T &operator[](size_t i) { return data_[i]; }
    const T &operator[](size_t i) const { return data_[i]; }
    T &back() { return data_[size_ - 1]; }

    void clear() { size_ = 0; }
    void assign(const T *first, const T *last) {
        size_t n = static_cast<size_t>(last - first);
        size_ = 0;
        grow(n);
        if (n) std::memcpy(static_cast<void *>(data_), first, n * sizeof(T));
        size_ = static_cast<uint32_t>(n);
    }
    void push_back(const T &v) {
        if (size_ == cap_) {
            T copy = v;  // v may live in the block grow() frees
            grow(size_ + 1);
            data_[size_++] = copy;
            return;
        }
        data_[size_++] = v;
    }
    T *insert(T *pos, const T &v) {
        size_t i = static_cast<size_t>(pos - data_);
        T copy = v;  // v may live in the block grow() frees
        grow(size_ + 1);
        std::memmove(static_cast<void *>(data_ + i + 1), data_ + i, (size_ - i) * sizeof(T));
        data_[i] = copy;
        ++size_;
        return data_ + i;
    }
    T *erase(T *pos) {
        size_t i = static_cast<size_t>(pos - data_);
        std::memmove(static_cast<void *>(data_ + i), data_ + i + 1, (size_ - i - 1) * sizeof(T));
        --size_;
        return data_ + i;
    }

   private:
    // The header is two words: a planner state keeps two of these inline, and
    // states are made by the thousand.
    alignas(T) unsigned char inline_[N * sizeof(T)];
    T *data_ = inline_data();
    uint32_t size_ = 0;
    uint32_t cap_ = N;

    T *inline_data() { return reinterpret_cast<T *>(inline_); }
    bool on_heap() const { return data_ != reinterpret_cast<const T *>(inline_); }
    void grow(size_t n) {
        if (n <= cap_) return;
        // At least four: a vector that outgrows one or two inline elements
        // tends to keep growing.
        size_t ncap = std::max({n, size_t{cap_} * 2, size_t{4}});
        if (ncap > UINT32_MAX) throw std::bad_alloc();
        T *nd = static_cast<T *>(std::malloc(ncap * sizeof(T)));
        if (!nd) throw std::bad_alloc();
        std::memcpy(static_cast<void *>(nd), data_, size_ * sizeof(T));
        if (on_heap()) std::free(data_);
        data_ = nd;
        cap_ = static_cast<uint32_t>(ncap);
    }
    // Steal o's heap block, or copy its inline elements; o is left empty.
    void take(SmallVec &o) noexcept {
        if (o.on_heap()) {
            data_ = o.data_;
            cap_ = o.cap_;
            o.data_ = o.inline_data();
            o.cap_ = N;
        } else if constexpr (sizeof(inline_) <= 64) {
            // A fixed-size copy of the whole buffer: no loop over the size.
            std::memcpy(inline_, o.inline_, sizeof(inline_));
        } else {
            std::memcpy(inline_, o.inline_, o.size_ * sizeof(T));  // at most N
        }
        size_ = o.size_;
        o.size_ = 0;
    }
    void assign(const SmallVec &o) {
        grow(o.size_);
        std::memcpy(static_cast<void *>(data_), o.data_, o.size_ * sizeof(T));
        size_ = o.size_;
    }
};

}  // namespace fluxion
