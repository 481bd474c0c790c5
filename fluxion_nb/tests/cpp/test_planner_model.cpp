// A planner against the plainest model of one: an array of free units per
// second. Random spans are added (fitting or not), removed and reduced; after
// every step each window's free minimum must agree with the model, and an
// add must succeed exactly when the model says the request fits.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <vector>

#include "planner/planner.hpp"

using namespace fluxion;

namespace {
struct Model {
    std::vector<int64_t> free;
    explicit Model(size_t horizon, int64_t total) : free(horizon, total) {}
    int64_t low(int64_t at, int64_t duration) const {
        return *std::min_element(free.begin() + at, free.begin() + at + duration);
    }
    void take(int64_t at, int64_t duration, int64_t n) {
        for (int64_t t = at; t < at + duration; ++t) free[static_cast<size_t>(t)] -= n;
    }
};
struct Held {
    int64_t at, duration, amount;
};
}  // namespace

TEST(PlannerModel, RandomSpansAgreeWithPerSecondCounts) {
    constexpr int64_t kHorizon = 64, kTotal = 12;
    for (unsigned seed = 1; seed <= 40; ++seed) {
        std::mt19937 rng(seed);
        auto pick = [&rng](int64_t lo, int64_t hi) {
            return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
        };
        Planner p(0, kHorizon, kTotal);
        Model m(kHorizon, kTotal);
        std::map<int64_t, Held> spans;
        for (int step = 0; step < 300; ++step) {
            int64_t op = pick(0, 9);
            if (op < 6 || spans.empty()) {
                // Window edges drawn from a few times, so spans share points.
                int64_t at = pick(0, 7) * 8 - pick(0, 1);
                at = std::max<int64_t>(at, 0);
                int64_t duration = std::min(pick(1, 3) * 8 + pick(-1, 1), kHorizon - at);
                if (duration < 1) continue;
                int64_t amount = pick(0, kTotal);
                bool fits = m.low(at, duration) >= amount;
                int64_t id = p.add_span(at, duration, amount);
                ASSERT_EQ(id >= 0, fits) << "seed " << seed << " step " << step;
                if (id >= 0) {
                    m.take(at, duration, amount);
                    spans[id] = Held{at, duration, amount};
                }
            } else {
                auto it = spans.begin();
                std::advance(it, pick(0, static_cast<int64_t>(spans.size()) - 1));
                Held &h = it->second;
                if (op < 8) {
                    ASSERT_TRUE(p.rem_span(it->first));
                    m.take(h.at, h.duration, -h.amount);
                    spans.erase(it);
                } else {
                    int64_t give = pick(1, std::max<int64_t>(h.amount, 1));
                    bool removed = false;
                    ASSERT_TRUE(p.reduce_span(it->first, give, removed));
                    int64_t back = std::min(give, h.amount);
                    m.take(h.at, h.duration, -back);
                    h.amount -= back;
                    if (removed) spans.erase(it);
                }
            }
            for (int64_t at = 0; at < kHorizon; at += 3)
                for (int64_t d : {1, 5, 17}) {
                    if (at + d > kHorizon) continue;
                    ASSERT_EQ(p.avail_during(at, d), m.low(at, d))
                        << "seed " << seed << " step " << step << " window " << at << "+" << d;
                }
        }
        ASSERT_EQ(p.span_count(), spans.size());
    }
}
