// sort_prefix must leave its prefix exactly as std::sort leaves it, ties
// included: the scoring policies' choices among equal scores depend on it.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <random>
#include <vector>

#include "util/sort_prefix.hpp"

using namespace fluxion;

namespace {

struct Item {
    int key;
    int tag;  // where it started: tells equal keys apart
};

template <class Cmp>
void check(const std::vector<Item> &input, std::ptrdiff_t prefix, Cmp cmp) {
    auto by_key = [&cmp](const Item &a, const Item &b) { return cmp(a.key, b.key); };
    std::vector<Item> want = input, got = input;
    std::sort(want.begin(), want.end(), by_key);
    sort_prefix(got.begin(), got.end(), prefix, by_key);
    std::ptrdiff_t n = std::min<std::ptrdiff_t>(prefix, static_cast<std::ptrdiff_t>(input.size()));
    for (std::ptrdiff_t i = 0; i < n; ++i) {
        ASSERT_EQ(got[static_cast<size_t>(i)].key, want[static_cast<size_t>(i)].key) << "at " << i;
        ASSERT_EQ(got[static_cast<size_t>(i)].tag, want[static_cast<size_t>(i)].tag) << "at " << i;
    }
    // The rest is a permutation of the rest.
    std::vector<int> a, b;
    for (const Item &x : got) a.push_back(x.tag);
    for (const Item &x : want) b.push_back(x.tag);
    std::sort(a.begin(), a.end());
    std::sort(b.begin(), b.end());
    ASSERT_EQ(a, b);
}

}  // namespace

TEST(SortPrefix, SameOrderAsStdSortWithTies) {
    std::mt19937 rng(7);
    for (int round = 0; round < 3000; ++round) {
        size_t n = rng() % 3 == 0 ? rng() % 40 : rng() % 5000;
        int distinct = 1 + static_cast<int>(rng() % (rng() % 2 ? 4 : 100000));
        std::vector<Item> v(n);
        for (size_t i = 0; i < n; ++i) v[i] = Item{static_cast<int>(rng() % static_cast<unsigned>(distinct)), static_cast<int>(i)};
        if (round % 7 == 0) std::sort(v.begin(), v.end(), [](const Item &a, const Item &b) { return a.key < b.key; });
        if (round % 11 == 0) std::reverse(v.begin(), v.end());
        std::ptrdiff_t prefix = static_cast<std::ptrdiff_t>(rng() % (n + 2));
        SCOPED_TRACE("round " + std::to_string(round) + " n " + std::to_string(n) + " prefix " + std::to_string(prefix));
        check(v, prefix, std::less<int>());
        check(v, prefix, std::greater<int>());
        check(v, static_cast<std::ptrdiff_t>(n), std::less<int>());
    }
}

TEST(SortPrefix, InputsHardOnMedianOfThreePivots) {
    // Saw-tooth halves, the shape of the classic median-of-three killer.
    for (size_t n : {64u, 1000u, 4096u}) {
        std::vector<Item> v(n);
        for (size_t i = 0; i < n; ++i) v[i] = Item{0, static_cast<int>(i)};
        size_t half = n / 2;
        for (size_t i = 0; i < half; ++i) {
            v[i].key = static_cast<int>(i % 2 ? half + i : i + 1);
            v[half + i].key = static_cast<int>(2 * (i + 1));
        }
        for (std::ptrdiff_t p : {std::ptrdiff_t{1}, std::ptrdiff_t{17}, static_cast<std::ptrdiff_t>(n)})
            check(v, p, std::less<int>());
    }
}
