// Satisfiability means "could this fit on the graph with nothing held", for
// every duration including 0 (the rest of the graph's horizon); and jobspecs
// the traverser can never match are refused as input errors.
#include <gtest/gtest.h>

#include <string>

#include "util/errors.hpp"
#include "matcher.hpp"
#include "pool_graph.hpp"

using namespace fluxion;

namespace {
using test_graphs::pool_graph;

std::string tail(int64_t duration, const std::string &constraints = "") {
    std::string sys = "\"duration\":" + std::to_string(duration);
    if (!constraints.empty()) sys += ",\"constraints\":" + constraints;
    return "\"attributes\":{\"system\":{" + sys + "}}}";
}

// One slot of `cores` core units and one memory unit.
std::string slot_cores(int64_t cores, int64_t duration, int count = 1) {
    return R"({"version":1,"resources":[{"type":"slot","count":)" + std::to_string(count) +
           R"(,"label":"pod","with":[{"type":"core","count":)" + std::to_string(cores) +
           R"(},{"type":"memory","count":1}]}],"tasks":[{"command":["x"],"slot":"pod","count":{"per_slot":1}}],)" +
           tail(duration);
}

// One slot holding a whole node.
std::string slot_node(int64_t duration, const std::string &constraints = "") {
    return R"({"version":1,"resources":[{"type":"slot","count":1,"label":"s","with":[{"type":"node","count":1}]}],)"
           R"("tasks":[{"command":["x"],"slot":"s","count":{"per_slot":1}}],)" +
           tail(duration, constraints);
}

const char *kVirtualFalse = R"({"properties":["virtual=false"]})";

MatcherOptions fluxion_opts() { return MatcherOptions{"first", "ALL:core,ALL:node", "jgf", {}}; }
MatcherOptions pooled_opts() { return MatcherOptions{"first", "ALL:core,ALL:node", "jgf", {"core", "memory"}}; }
}  // namespace

// --- A: sibling slots -------------------------------------------------------

TEST(SiblingSlots, TopLevelPairIsAnInputErrorForEveryOp) {
    const std::string js =
        R"({"version":1,"resources":[)"
        R"({"type":"slot","count":1,"label":"a","with":[{"type":"core","count":1000},{"type":"memory","count":1}]},)"
        R"({"type":"slot","count":1,"label":"b","with":[{"type":"core","count":500},{"type":"memory","count":1}]}],)"
        R"("tasks":[{"command":["x"],"slot":"a","count":{"per_slot":1}},{"command":["x"],"slot":"b","count":{"per_slot":1}}],)" +
        tail(3600);
    for (const auto &opts : {fluxion_opts(), pooled_opts()}) {
        Matcher m(pool_graph(2, 4000), opts);
        for (const char *op : {"allocate", "allocate_with_satisfiability", "allocate_orelse_reserve",
                               "satisfiability", "without_allocating"}) {
            try {
                m.match(js, op);
                ADD_FAILURE() << op << ": expected InputError";
            } catch (const InputError &e) {
                std::string what = e.what();
                EXPECT_NE(what.find("sibling slots"), std::string::npos) << what;
                EXPECT_NE(what.find("'a', 'b'"), std::string::npos) << what;
            }
        }
        // Refused before matching: nothing held, no job id used.
        EXPECT_EQ(m.next_jobid(), 1);
        EXPECT_EQ(m.match(slot_cores(1000, 3600), "allocate").status, "allocated");
    }
}

TEST(SiblingSlots, NestedPairIsAnInputError) {
    const std::string js =
        R"({"version":1,"resources":[{"type":"node","count":1,"with":[)"
        R"({"type":"slot","count":1,"label":"a","with":[{"type":"core","count":1}]},)"
        R"({"type":"slot","count":1,"label":"b","with":[{"type":"memory","count":1}]}]}],)"
        R"("tasks":[{"command":["x"],"slot":"a","count":{"per_slot":1}}],)" +
        tail(60);
    Matcher m(pool_graph(1, 4), fluxion_opts());
    EXPECT_THROW(m.match(js, "allocate"), InputError);
}

TEST(SiblingSlots, SameTypeSiblingsStayNoMatchAsInFluxion) {
    // flux-sched's sibling tests expect "No matching resources found" here.
    const std::string js =
        R"({"version":1,"resources":[{"type":"slot","count":1,"label":"a","with":[)"
        R"({"type":"core","count":1},{"type":"core","count":1}]}],)"
        R"("tasks":[{"command":["x"],"slot":"a","count":{"per_slot":1}}],)" +
        tail(60);
    Matcher m(pool_graph(1, 4), fluxion_opts());
    EXPECT_EQ(m.match(js, "allocate").status, "busy");
}

// --- B: constraints with a whole-horizon duration -----------------------------

TEST(Satisfiability, ConstrainedWholeHorizonRequestIsSatisfiable) {
    for (int64_t duration : {0, 3600}) {
        Matcher m(pool_graph(2, 4), fluxion_opts());
        m.set_property("/cluster/node0", "virtual=false", "");
        m.set_property("/cluster/node1", "virtual=false", "");
        EXPECT_EQ(m.match(slot_node(duration, kVirtualFalse), "satisfiability").status, "satisfiable") << duration;
        auto r = m.match(slot_node(duration, kVirtualFalse), "allocate_with_satisfiability");
        EXPECT_EQ(r.status, "allocated") << duration;
        EXPECT_EQ(m.match(slot_node(duration, kVirtualFalse), "allocate").status, "allocated") << duration;
        // Both nodes held now: busy, not unsatisfiable.
        EXPECT_EQ(m.match(slot_node(duration, kVirtualFalse), "allocate_with_satisfiability").status, "busy")
            << duration;
        EXPECT_EQ(m.match(slot_node(duration, kVirtualFalse), "satisfiability").status, "satisfiable") << duration;
    }
}

TEST(Satisfiability, ConstraintNoNodeMeetsIsUnsatisfiable) {
    Matcher m(pool_graph(2, 4), fluxion_opts());
    m.set_property("/cluster/node0", "virtual=false", "");
    const char *gpu = R"({"properties":["gpu"]})";
    EXPECT_EQ(m.match(slot_node(0, gpu), "satisfiability").status, "unsatisfiable");
    EXPECT_EQ(m.match(slot_node(60, gpu), "allocate_with_satisfiability").status, "unsatisfiable");
}

TEST(Satisfiability, ConstrainedRequestCanBeReservedAfterAHold) {
    Matcher m(pool_graph(2, 4), fluxion_opts());
    m.set_property("/cluster/node0", "virtual=false", "");
    EXPECT_EQ(m.match(slot_node(3600, kVirtualFalse), "allocate_orelse_reserve").status, "allocated");
    auto r = m.match(slot_node(3600, kVirtualFalse), "allocate_orelse_reserve");
    EXPECT_EQ(r.status, "reserved");
    EXPECT_EQ(r.at, 3600);
}

// --- C: duration 0 on partial pools -------------------------------------------

TEST(Satisfiability, DurationZeroOnAFullPoolIsBusyNotAnError) {
    Matcher m(pool_graph(1, 1000), pooled_opts());
    ASSERT_EQ(m.match(slot_cores(1000, 0), "allocate").status, "allocated");
    auto r = m.match(slot_cores(1000, 0), "allocate_with_satisfiability");
    EXPECT_EQ(r.status, "busy") << r.error;
    r = m.match(slot_cores(1000, 0), "satisfiability");
    EXPECT_EQ(r.status, "satisfiable") << r.error;
    r = m.match(slot_cores(1000, 0), "allocate_orelse_reserve");
    EXPECT_EQ(r.status, "busy") << r.error;
    // Bigger than the pool can ever be.
    EXPECT_EQ(m.match(slot_cores(1001, 0), "satisfiability").status, "unsatisfiable");
    EXPECT_EQ(m.match(slot_cores(1001, 0), "allocate_with_satisfiability").status, "unsatisfiable");
    EXPECT_EQ(m.match(slot_cores(500, 0, 3), "satisfiability").status, "unsatisfiable");
    EXPECT_EQ(m.match(slot_cores(500, 0, 2), "satisfiability").status, "satisfiable");
}

TEST(Satisfiability, DurationZeroOnAnEmptyGraph) {
    for (const auto &opts : {fluxion_opts(), pooled_opts()}) {
        Matcher m(pool_graph(1, 1000), opts);
        EXPECT_EQ(m.match(slot_cores(1000, 0), "satisfiability").status, "satisfiable");
        EXPECT_EQ(m.match(slot_cores(1000, 0), "allocate_with_satisfiability").status, "allocated");
    }
}

// --- D: current holds do not make a request unsatisfiable ---------------------

TEST(Satisfiability, IgnoresAWholeHorizonHold) {
    Matcher m(pool_graph(1, 1000), pooled_opts());
    ASSERT_EQ(m.match(slot_cores(1000, 0), "allocate").status, "allocated");
    int64_t next = m.next_jobid();
    EXPECT_EQ(m.match(slot_cores(1000, 1), "satisfiability").status, "satisfiable");
    EXPECT_EQ(m.next_jobid(), next);  // satisfiability takes no job id
    EXPECT_EQ(m.match(slot_cores(1000, 1), "allocate_with_satisfiability").status, "busy");
    EXPECT_EQ(m.match(slot_cores(1000, 1), "allocate_orelse_reserve").status, "busy");
    // ...and it changed nothing: once the hold goes, the request fits.
    ASSERT_TRUE(m.cancel(1, false));
    EXPECT_EQ(m.match(slot_cores(1000, 1), "allocate").status, "allocated");
}

TEST(Satisfiability, IgnoresAnExclusiveWholeHorizonHold) {
    Matcher m(pool_graph(1, 4), fluxion_opts());
    const std::string excl_node =
        R"({"version":1,"resources":[{"type":"node","count":1,"exclusive":true,"with":[{"type":"slot","count":1,"label":"s","with":[{"type":"core","count":1}]}]}],)"
        R"("tasks":[{"command":["x"],"slot":"s","count":{"per_slot":1}}],)" +
        tail(0);
    ASSERT_EQ(m.match(excl_node, "allocate").status, "allocated");
    EXPECT_EQ(m.match(excl_node, "satisfiability").status, "satisfiable");
    EXPECT_EQ(m.match(excl_node, "allocate_with_satisfiability").status, "busy");
}

TEST(Satisfiability, DownNodesStillCountButMissingCapacityDoesNot) {
    Matcher m(pool_graph(2, 4), fluxion_opts());
    m.set_status("/cluster/node1", false);
    EXPECT_EQ(m.match(slot_cores(4, 60, 2), "satisfiability").status, "satisfiable");
    EXPECT_EQ(m.match(slot_cores(4, 60, 2), "allocate_with_satisfiability").status, "busy");
    EXPECT_EQ(m.match(slot_cores(4, 60, 3), "allocate_with_satisfiability").status, "unsatisfiable");
}
