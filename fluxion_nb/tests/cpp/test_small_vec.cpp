// SmallVec against std::vector: the same random pushes, inserts, erases,
// copies and moves, across the move from inline storage to the heap.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "util/small_vec.hpp"

using namespace fluxion;

namespace {
template <class T, size_t N>
void expect_same(const SmallVec<T, N> &v, const std::vector<T> &model) {
    ASSERT_EQ(v.size(), model.size());
    ASSERT_EQ(v.empty(), model.empty());
    for (size_t i = 0; i < model.size(); ++i) EXPECT_EQ(v[i], model[i]) << "at " << i;
}

template <size_t N>
void run_against_model(unsigned seed) {
    std::mt19937 rng(seed);
    auto pick = [&rng](size_t hi) { return std::uniform_int_distribution<size_t>(0, hi)(rng); };
    SmallVec<int64_t, N> v;
    std::vector<int64_t> model;
    for (int step = 0; step < 400; ++step) {
        int64_t x = static_cast<int64_t>(rng());
        switch (pick(6)) {
            case 0:
            case 1:
                v.push_back(x);
                model.push_back(x);
                break;
            case 2: {
                size_t at = pick(model.size());
                v.insert(v.begin() + at, x);
                model.insert(model.begin() + static_cast<long>(at), x);
                break;
            }
            case 3:
                if (!model.empty()) {
                    size_t at = pick(model.size() - 1);
                    v.erase(v.begin() + at);
                    model.erase(model.begin() + static_cast<long>(at));
                }
                break;
            case 4: {  // copy, then move back through a temporary
                SmallVec<int64_t, N> copy(v);
                expect_same(copy, model);
                SmallVec<int64_t, N> moved(std::move(copy));
                EXPECT_TRUE(copy.empty());
                v = std::move(moved);
                EXPECT_TRUE(moved.empty());
                break;
            }
            case 5:
                if (pick(20) == 0) {
                    v.clear();
                    model.clear();
                }
                break;
            default: {  // assign over an existing vector of another size
                SmallVec<int64_t, N> other;
                const size_t n = pick(3 * N);
                for (size_t i = 0; i < n; ++i) other.push_back(static_cast<int64_t>(i));
                other = v;
                expect_same(other, model);
                break;
            }
        }
        expect_same(v, model);
        if (::testing::Test::HasFailure()) return;
    }
}
}  // namespace

TEST(SmallVec, RandomOperationsAgreeWithVector) {
    for (unsigned seed = 1; seed <= 20; ++seed) {
        run_against_model<1>(seed);
        run_against_model<2>(seed);
        run_against_model<4>(seed);
        run_against_model<64>(seed);
        if (HasFailure()) FAIL() << "seed " << seed;
    }
}

TEST(SmallVec, PushedValueMayLiveInTheVectorItself) {
    // push_back(v[0]) when the push moves the elements to the heap: the value
    // must be read before the old storage goes.
    SmallVec<int64_t, 2> v;
    v.push_back(7);
    v.push_back(8);
    v.push_back(v[0]);
    v.insert(v.begin(), v[2]);
    std::vector<int64_t> want{7, 7, 8, 7};
    expect_same(v, want);
}

TEST(SmallVec, HeaderIsTwoWords) {
    // Planner states keep two of these inline; the header is what they cost
    // beyond their elements.
    EXPECT_EQ(sizeof(SmallVec<int64_t, 2>), 2 * sizeof(int64_t) + 16);
    EXPECT_EQ(sizeof(SmallVec<int64_t, 1>), sizeof(int64_t) + 16);
}
