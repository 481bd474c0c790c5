// std::sort's order for the first elements of a range only.
//
// The scoring policies take the best k candidates as flux-sched does: the
// first k after libstdc++'s std::sort, with ties falling wherever its
// introsort leaves them. Sorting every candidate to read k of them costs
// n log n. This is the same introsort (median-of-three pivot moved to the
// front, unguarded partition, a depth limit of twice log2(n) falling back to
// heapsort, insertion sort below 16 elements) except that it leaves unsorted
// a right-hand part that lies wholly beyond the prefix. A part's elements
// only ever move within it, and every element of a part is ordered against
// every element of the parts beside it, so the prefix comes out exactly as
// std::sort would leave it, in about 2n comparisons.
#pragma once
#include <algorithm>
#include <cstddef>
#include <iterator>
#include <utility>

namespace fluxion {

namespace sort_detail {

constexpr std::ptrdiff_t kInsertionThreshold = 16;

template <class It, class Cmp>
void move_median_to_first(It result, It a, It b, It c, Cmp &cmp) {
    if (cmp(*a, *b)) {
        if (cmp(*b, *c))
            std::iter_swap(result, b);
        else if (cmp(*a, *c))
            std::iter_swap(result, c);
        else
            std::iter_swap(result, a);
    } else if (cmp(*a, *c)) {
        std::iter_swap(result, a);
    } else if (cmp(*b, *c)) {
        std::iter_swap(result, c);
    } else {
        std::iter_swap(result, b);
    }
}

template <class It, class Cmp>
It unguarded_partition(It first, It last, It pivot, Cmp &cmp) {
    while (true) {
        while (cmp(*first, *pivot)) ++first;
        --last;
        while (cmp(*pivot, *last)) --last;
        if (!(first < last)) return first;
        std::iter_swap(first, last);
        ++first;
    }
}

template <class It, class Cmp>
void unguarded_linear_insert(It last, Cmp &cmp) {
    auto val = std::move(*last);
    It next = last;
    --next;
    while (cmp(val, *next)) {
        *last = std::move(*next);
        last = next;
        --next;
    }
    *last = std::move(val);
}

template <class It, class Cmp>
void insertion_sort(It first, It last, Cmp &cmp) {
    if (first == last) return;
    for (It i = first + 1; i != last; ++i) {
        if (cmp(*i, *first)) {
            auto val = std::move(*i);
            std::move_backward(first, i, i + 1);
            *first = std::move(val);
        } else {
            unguarded_linear_insert(i, cmp);
        }
    }
}

// Sorts [first, last) as far as `stop` needs; `done` is lowered to the start
// of the first part left unsorted.
template <class It, class Cmp>
void introsort_loop(It first, It last, std::ptrdiff_t depth, It stop, It &done, Cmp &cmp) {
    while (last - first > kInsertionThreshold) {
        if (depth == 0) {
            std::partial_sort(first, last, last, cmp);  // libstdc++'s heapsort fallback
            return;
        }
        --depth;
        It mid = first + (last - first) / 2;
        move_median_to_first(first, first + 1, mid, last - 1, cmp);
        It cut = unguarded_partition(first + 1, last, first, cmp);
        if (cut < stop)
            introsort_loop(cut, last, depth, stop, done, cmp);
        else if (cut < done)
            done = cut;
        last = cut;
    }
}

inline std::ptrdiff_t floor_log2(std::ptrdiff_t n) {
    std::ptrdiff_t k = 0;
    while (n > 1) {
        n >>= 1;
        ++k;
    }
    return k;
}

}  // namespace sort_detail

// Leaves [first, first + prefix) as std::sort(first, last, cmp) would; the
// rest holds the other elements in no particular order. prefix >= the length
// sorts the whole range.
template <class It, class Cmp>
void sort_prefix(It first, It last, std::ptrdiff_t prefix, Cmp cmp) {
    if (first == last) return;
    std::ptrdiff_t n = last - first;
    It stop = first + std::min(prefix, n);
    It done = last;
    sort_detail::introsort_loop(first, last, sort_detail::floor_log2(n) * 2, stop, done, cmp);
    if (done - first > sort_detail::kInsertionThreshold) {
        sort_detail::insertion_sort(first, first + sort_detail::kInsertionThreshold, cmp);
        for (It i = first + sort_detail::kInsertionThreshold; i != done; ++i)
            sort_detail::unguarded_linear_insert(i, cmp);
    } else {
        sort_detail::insertion_sort(first, done, cmp);
    }
}

}  // namespace fluxion
