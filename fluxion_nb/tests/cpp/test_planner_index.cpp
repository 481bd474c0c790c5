// The earliest-fit search sees each scheduled point's free amount as last
// indexed: a span change or a look by a search refreshes it, a capacity
// change does not (Fluxion's min-time index behaves so, and reservations
// after a grow depend on it).
#include <gtest/gtest.h>

#include "planner/planner.hpp"

using namespace fluxion;

TEST(PlannerIndex, GrownCapacityIsSeenOnlyWhereSpansChangedSince) {
    Planner p(0, 100000, 36);
    ASSERT_GE(p.add_span(0, 3600, 36), 0);     // points 0 and 3600
    ASSERT_GE(p.add_span(3600, 3600, 36), 0);  // points 3600 and 7200
    p.set_total(72);                           // 36 free at 0 and at 3600 now
    int64_t job = p.add_span(0, 3600, 36);     // re-indexes the point at 0
    ASSERT_GE(job, 0);
    EXPECT_EQ(p.avail_at(3600), 36);
    // The point at 3600 still looks full to the search: the first fit for
    // 36 units is at 7200.
    EXPECT_EQ(p.avail_time_first(1, 3600, 36), 7200);
    // The search looked at 7200 only; a span change at 3600 refreshes it.
    int64_t small = p.add_span(3600, 10, 1);
    ASSERT_GE(small, 0);
    ASSERT_TRUE(p.rem_span(small));
    EXPECT_EQ(p.avail_time_first(1, 3600, 36), 3600);
}

TEST(PlannerIndex, ShrinkingNeverFindsATimeThatDoesNotFit) {
    Planner p(0, 100000, 10);
    ASSERT_GE(p.add_span(100, 100, 2), 0);
    p.set_total(6);
    // Indexed amounts are higher than what is free; the window check decides.
    EXPECT_EQ(p.avail_time_first(0, 50, 8), -1);
    EXPECT_EQ(p.avail_time_first(0, 300, 5), 200);
    EXPECT_EQ(p.avail_time_first(0, 50, 6), 0);
}
