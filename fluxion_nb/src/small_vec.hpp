// A vector of plain values that keeps its first N elements inline and moves
// to the heap only beyond them: a planner's few time points and spans then
// live in the planner's own block.
#pragma once
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
            if (heap_) std::free(data_);
            data_ = reinterpret_cast<T *>(inline_);
            cap_ = N;
            heap_ = false;
            take(o);
        }
        return *this;
    }
    ~SmallVec() {
        if (heap_) std::free(data_);
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
        size_ = n;
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
    alignas(T) unsigned char inline_[N * sizeof(T)];
    T *data_ = reinterpret_cast<T *>(inline_);
    size_t size_ = 0;
    size_t cap_ = N;
    bool heap_ = false;

    void grow(size_t n) {
        if (n <= cap_) return;
        size_t ncap = cap_ * 2 < n ? n : cap_ * 2;
        T *nd = static_cast<T *>(std::malloc(ncap * sizeof(T)));
        if (!nd) throw std::bad_alloc();
        std::memcpy(static_cast<void *>(nd), data_, size_ * sizeof(T));
        if (heap_) std::free(data_);
        data_ = nd;
        cap_ = ncap;
        heap_ = true;
    }
    // Steal o's heap block, or copy its inline elements; o is left empty.
    void take(SmallVec &o) noexcept {
        if (o.heap_) {
            data_ = o.data_;
            cap_ = o.cap_;
            heap_ = true;
            o.data_ = reinterpret_cast<T *>(o.inline_);
            o.cap_ = N;
            o.heap_ = false;
        } else {
            for (size_t i = 0; i < o.size_; ++i) data_[i] = o.data_[i];  // at most N
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
