#include <gtest/gtest.h>

#include "util/errors.hpp"
#include "util/json.hpp"
#include "jobspec/jobspec.hpp"
#include "matcher.hpp"
#include "planner/planner.hpp"
#include "pool_graph.hpp"

using namespace fluxion;

namespace {
// cluster0 -> node0,node1 -> core pool (size 4) + memory pool (size 8).
std::string pooled_graph() { return test_graphs::pool_graph(2, 4, "cluster0"); }

const char *kSlotCore1 =
    R"({"version":1,"resources":[{"type":"slot","count":1,"label":"t","with":[{"type":"core","count":1}]}],
        "tasks":[{"command":["x"],"slot":"t","count":{"per_slot":1}}],"attributes":{"system":{"duration":60}}})";
}  // namespace

TEST(Json, RoundTripsNestedDocument) {
    auto v = json::parse(R"({"a": [1, 2.5, "x\n", true, null], "b": {"c": -3}})");
    EXPECT_EQ(json::dump(v), R"({"a": [1, 2.5, "x\n", true, null], "b": {"c": -3}})");
}

TEST(Json, RejectsTruncatedInputWithOffset) {
    try {
        json::parse(R"({"a": [1, 2)");
        FAIL() << "expected InputError";
    } catch (const InputError &e) {
        EXPECT_NE(std::string(e.what()).find("byte"), std::string::npos);
    }
}

TEST(Planner, SpansReduceAvailabilityOnlyInsideTheirWindow) {
    Planner p(0, 100, 10);
    int64_t s = p.add_span(10, 20, 4);
    ASSERT_GE(s, 0);
    EXPECT_EQ(p.avail_during(0, 10), 10);
    EXPECT_EQ(p.avail_during(5, 10), 6);
    EXPECT_EQ(p.avail_at(29), 6);
    EXPECT_EQ(p.avail_at(30), 10);
    EXPECT_EQ(p.avail_time_first(1, 10, 8), 30);
    ASSERT_TRUE(p.rem_span(s));
    EXPECT_EQ(p.avail_during(0, 100), 10);
}

TEST(Planner, RefusesOverCommit) {
    Planner p(0, 100, 2);
    EXPECT_GE(p.add_span(0, 10, 2), 0);
    EXPECT_EQ(p.add_span(5, 10, 1), -1);
}

TEST(Jobspec, UnknownTypeIsAnInputError) {
    TypeTable t;
    EXPECT_THROW(parse_jobspec_text(R"({"version":1,"resources":[{"type":"bogus","count":1}],"tasks":[],"attributes":{}})", t),
                 InputError);
}

TEST(Hostlist, ExpandsAndCompresses) {
    auto h = expand_hostlist("node[0-2,5],login1");
    ASSERT_EQ(h.size(), 5u);
    EXPECT_EQ(h[3], "node5");
    EXPECT_EQ(compress_hostlist({"node0", "node1", "node2", "node5"}), "node[0-2,5]");
    EXPECT_EQ(format_idset({0, 1, 2, 7}), "0-2,7");
}

TEST(Hostlist, RangesJoinAcrossDigitCountsWithoutLeadingZeros) {
    std::vector<std::string> workers;
    for (int i = 2; i <= 16; ++i) workers.push_back("worker" + std::to_string(i));
    EXPECT_EQ(compress_hostlist(workers), "worker[2-16]");
    EXPECT_EQ(compress_hostlist({"n98", "n99", "n100", "n101"}), "n[98-101]");
    EXPECT_EQ(compress_hostlist({"n08", "n09", "n10", "n11"}), "n[08-11]");
    // Zeros would be lost or added at either width: two ranges.
    EXPECT_EQ(compress_hostlist({"n009", "n10"}), "n[009,10]");
    EXPECT_EQ(compress_hostlist({"n9", "n010"}), "n[9,010]");
    auto back = expand_hostlist(compress_hostlist(workers));
    EXPECT_EQ(back, workers);
}

TEST(Matcher, FluxionDefaultTakesWholePoolUnderASlot) {
    Matcher m(pooled_graph(), MatcherOptions{"first", "ALL:core,ALL:node", "simple", {}});
    auto r1 = m.match(kSlotCore1, "allocate");
    ASSERT_EQ(r1.status, "allocated");
    EXPECT_NE(r1.R.find("[4:x]"), std::string::npos) << r1.R;
    ASSERT_EQ(m.match(kSlotCore1, "allocate").status, "allocated");
    EXPECT_EQ(m.match(kSlotCore1, "allocate").status, "busy");
}

TEST(Matcher, PartialPoolSharesUnitsAndCancelReturnsThem) {
    Matcher m(pooled_graph(), MatcherOptions{"first", "ALL:core,ALL:node", "simple", {"core", "memory"}});
    for (int i = 0; i < 8; ++i) ASSERT_EQ(m.match(kSlotCore1, "allocate").status, "allocated") << i;
    EXPECT_EQ(m.match(kSlotCore1, "allocate").status, "busy");
    EXPECT_TRUE(m.cancel(3, false));
    EXPECT_EQ(m.match(kSlotCore1, "allocate").status, "allocated");
}

TEST(Matcher, BadJgfChangesNothingAndSaysWhy) {
    EXPECT_THROW(Matcher("{\"graph\":{\"nodes\":[{\"id\":\"0\"}],\"edges\":[]}}", MatcherOptions{}), InputError);
    Matcher m(pooled_graph(), MatcherOptions{});
    EXPECT_THROW(m.match("{not json", "allocate"), InputError);
    EXPECT_EQ(m.next_jobid(), 1);
}
