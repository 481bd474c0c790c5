// Rules of flux-sched's resource-query that hold across a session: which
// resource types a jobspec may name, what the rv1 writers print when R_lite
// records nothing, and how a reservation meets the end of the graph.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "util/errors.hpp"
#include "util/json.hpp"
#include "matcher.hpp"
#include "pool_graph.hpp"

using namespace fluxion;

namespace {

// cluster0 -> node0..3 -> core0, core1 (one vertex each) + memory0 (size 8).
std::string four_nodes() {
    test_graphs::JgfBuilder b;
    int root = b.vertex("cluster", "cluster0", 0, "/cluster0", 1, -1);
    for (int n = 0; n < 4; ++n) {
        std::string np = "/cluster0/node" + std::to_string(n);
        int nv = b.vertex("node", "node" + std::to_string(n), n, np, 1, n);
        b.edge(root, nv);
        for (int c = 0; c < 2; ++c)
            b.edge(nv, b.vertex("core", "core" + std::to_string(c), c, np + "/core" + std::to_string(c), 1, n));
        b.edge(nv, b.vertex("memory", "memory0", 0, np + "/memory0", 8, n));
    }
    return b.text();
}

// A slot of `count` of `type`, for `duration` seconds (0: the whole graph).
std::string slot_of(const std::string &type, int count, int slots = 1, int64_t duration = 60) {
    return R"({"version":1,"resources":[{"type":"slot","count":)" + std::to_string(slots) +
           R"(,"label":"t","with":[{"type":")" + type + R"(","count":)" + std::to_string(count) +
           R"(}]}],"tasks":[{"command":["x"],"slot":"t","count":{"per_slot":1}}],)"
           R"("attributes":{"system":{"duration":)" +
           std::to_string(duration) + "}}}";
}

MatcherOptions with_format(const std::string &format) {
    MatcherOptions o;
    o.match_format = format;
    return o;
}

std::vector<std::string> ids_of(const json::Value &list, const char *key) {
    std::vector<std::string> out;
    for (const auto &item : list.items()) out.push_back(item.find(key)->as_string());
    return out;
}

}  // namespace

// Known: the graph's types, the built-ins and the prune filters' types.
// Anything else is refused as the jobspec reader refuses it, and the refusal
// takes no job id.
TEST(JobspecTypes, ATypeKnownToNoOneIsRefusedAndTakesNoJobId) {
    Matcher m(four_nodes(), with_format("rv1_nosched"));
    try {
        m.match(slot_of("nic", 1), "allocate");
        FAIL() << "expected UnknownTypeError";
    } catch (const UnknownTypeError &e) {
        EXPECT_NE(std::string(e.what()).find("'nic' is not a resource type known to fluxion"), std::string::npos)
            << e.what();
    }
    EXPECT_EQ(m.next_jobid(), 1);
    // ssd is built in: read, matched, not found (busy), and the id is used.
    MatchResult ssd = m.match(slot_of("ssd", 1), "allocate");
    EXPECT_EQ(ssd.status, "busy");
    EXPECT_EQ(ssd.jobid, 1);
    EXPECT_EQ(m.next_jobid(), 2);
    MatchResult core = m.match(slot_of("core", 1), "allocate");
    EXPECT_EQ(core.status, "allocated");
    EXPECT_EQ(core.jobid, 2);
}

TEST(JobspecTypes, APruneFilterMakesItsTypesKnown) {
    MatcherOptions o = with_format("rv1_nosched");
    o.prune_filters = "ALL:core,ALL:nic";
    Matcher m(four_nodes(), o);
    EXPECT_EQ(m.match(slot_of("nic", 1), "allocate").status, "busy");
    EXPECT_EQ(m.next_jobid(), 2);
}

// R_lite records a node only when a core or gpu was emitted under it.
TEST(Rv1Writers, WriteNothingWhenRliteRecordsNothing) {
    for (const char *format : {"rv1", "rv1_nosched"}) {
        Matcher m(four_nodes(), with_format(format));
        MatchResult mem = m.match(slot_of("memory", 4), "allocate");
        EXPECT_EQ(mem.status, "allocated") << format;
        EXPECT_EQ(mem.R, "") << format;
        EXPECT_EQ(m.find("jobid-alloc=1", ""), "") << format;  // memory, its node, the cluster
        EXPECT_EQ(m.find("names=node0", ""), "") << format;
        EXPECT_NE(m.find("names=core0", ""), "") << format;
    }
}

// A session's rv1 writer keeps the scheduling graph of an R it did not print
// and puts it before the next one's.
TEST(Rv1Writers, CarryTheUnprintedSchedulingGraphToTheNextR) {
    // What job 1 and job 2 hold, from a matcher that writes JGF.
    Matcher plain(four_nodes(), with_format("jgf"));
    json::Value mem_graph = *json::parse(plain.match(slot_of("memory", 4), "allocate").R).find("graph");
    json::Value core_graph = *json::parse(plain.match(slot_of("core", 1), "allocate").R).find("graph");
    std::vector<std::string> want_nodes = ids_of(*mem_graph.find("nodes"), "id");
    for (const auto &id : ids_of(*core_graph.find("nodes"), "id")) want_nodes.push_back(id);
    std::vector<std::string> want_targets = ids_of(*mem_graph.find("edges"), "target");
    for (const auto &id : ids_of(*core_graph.find("edges"), "target")) want_targets.push_back(id);
    ASSERT_EQ(want_nodes.size(), 6u);
    ASSERT_EQ(want_targets.size(), 4u);

    MatcherOptions o = with_format("rv1");
    o.carry_unprinted_schedule = true;
    Matcher m(four_nodes(), o);
    ASSERT_EQ(m.match(slot_of("memory", 4), "allocate").R, "");
    json::Value r = json::parse(m.match(slot_of("core", 1), "allocate").R);
    const json::Value &graph = *r.find("scheduling")->find("graph");
    EXPECT_EQ(ids_of(*graph.find("nodes"), "id"), want_nodes);
    EXPECT_EQ(ids_of(*graph.find("edges"), "target"), want_targets);
    EXPECT_EQ(r.find("execution")->find("R_lite")->items().size(), 1u);
    // Printed once: the next R carries only its own.
    json::Value r3 = json::parse(m.match(slot_of("core", 1), "allocate").R);
    EXPECT_EQ(r3.find("scheduling")->find("graph")->find("nodes")->items().size(), 3u);
}

TEST(Rv1Writers, ALibraryMatcherCarriesNothing) {
    Matcher m(four_nodes(), with_format("rv1"));
    ASSERT_EQ(m.match(slot_of("memory", 4), "allocate").R, "");
    json::Value r = json::parse(m.match(slot_of("core", 1), "allocate").R);
    EXPECT_EQ(r.find("scheduling")->find("graph")->find("nodes")->items().size(), 3u);
}

// Vertex planners span 0..INT64_MAX: a job may start before the graph's end
// and run past it, its duration cut to the end.
TEST(GraphEnd, AReservationMayRunPastTheEndCutToIt) {
    Matcher m(four_nodes(), with_format("rv1_nosched"));
    ASSERT_EQ(m.match(slot_of("core", 1, 8, 100), "allocate").status, "allocated");
    MatchResult future = m.match(slot_of("core", 1, 1, 0), "without_allocating_future");
    EXPECT_EQ(future.status, "matched");
    EXPECT_EQ(future.jobid, 2);
    EXPECT_EQ(future.at, 100);
    EXPECT_NE(future.R.find("\"starttime\": 100, \"expiration\": 3153600000"), std::string::npos) << future.R;
    MatchResult reserved = m.match(slot_of("core", 1, 1, 0), "allocate_orelse_reserve");
    EXPECT_EQ(reserved.status, "reserved");
    EXPECT_EQ(reserved.jobid, 2);
    EXPECT_EQ(reserved.at, 100);
    EXPECT_EQ(reserved.duration, 3153600000 - 100);
    // A longer job fits after it too, the same way.
    MatchResult later = m.match(slot_of("core", 2, 1, 3153600000), "allocate_orelse_reserve");
    EXPECT_EQ(later.status, "reserved");
    EXPECT_EQ(later.at, 100);
}
