// Vertices with several containment parents (multi-tiered storage: a rack's
// L1 unit is also part of the global L2 unit), as Fluxion's readers allow.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "util/errors.hpp"
#include "graph/graph.hpp"
#include "matcher.hpp"

using namespace fluxion;

namespace {

// cluster0 -> rack0 -> {node0 -> core0, l1unit0 -> ssd0, ssd1}
//          -> l2unit0 -> l1unit0 (second parent)
std::string tiered_jgf() {
    return R"({"graph":{"nodes":[
 {"id":"0","metadata":{"type":"cluster","name":"cluster0","id":0,"paths":{"containment":"/cluster0"}}},
 {"id":"1","metadata":{"type":"rack","name":"rack0","id":0,"paths":{"containment":"/cluster0/rack0"}}},
 {"id":"2","metadata":{"type":"node","name":"node0","id":0,"rank":0,"paths":{"containment":"/cluster0/rack0/node0"}}},
 {"id":"3","metadata":{"type":"core","name":"core0","id":0,"rank":0,"paths":{"containment":"/cluster0/rack0/node0/core0"}}},
 {"id":"4","metadata":{"type":"l1unit","name":"l1unit0","id":0,"paths":{"containment":"/cluster0/l2unit0/l1unit0"}}},
 {"id":"5","metadata":{"type":"ssd","name":"ssd0","id":0,"size":512,"paths":{"containment":"/cluster0/rack0/l1unit0/ssd0"}}},
 {"id":"6","metadata":{"type":"ssd","name":"ssd1","id":1,"size":512,"paths":{"containment":"/cluster0/rack0/l1unit0/ssd1"}}},
 {"id":"7","metadata":{"type":"l2unit","name":"l2unit0","id":0,"paths":{"containment":"/cluster0/l2unit0"}}}],
 "edges":[
 {"source":"0","target":"1"},{"source":"1","target":"2"},{"source":"2","target":"3"},
 {"source":"1","target":"4"},{"source":"4","target":"5"},{"source":"4","target":"6"},
 {"source":"0","target":"7"},{"source":"7","target":"4"}]}})";
}

// node[1]->slot->core[1] in the rack, plus 512 exclusive units of ssd under
// the L2 unit (so reached through l1unit0's second parent).
const char *kL2Job = R"({"version":1,"resources":[
 {"type":"rack","count":1,"with":[{"type":"node","count":1,"with":[
   {"type":"slot","count":1,"label":"t","with":[{"type":"core","count":1}]}]}]},
 {"type":"l2unit","count":1,"with":[{"type":"l1unit","count":1,"with":[
   {"type":"ssd","count":512,"exclusive":true}]}]}],
 "tasks":[{"command":["x"],"slot":"t","count":{"per_slot":1}}],"attributes":{"system":{"duration":60}}})";

const char *kL1Job = R"({"version":1,"resources":[
 {"type":"rack","count":1,"with":[{"type":"l1unit","count":1,"with":[
   {"type":"ssd","count":1024,"exclusive":true}]}]}],
 "tasks":[{"command":["x"],"slot":"t","count":{"per_slot":1}}],"attributes":{"system":{"duration":60}}})";

std::vector<std::string> names(const Matcher &m, const MatchResult &r) {
    std::vector<std::string> out;
    for (const auto &v : m.describe(r.emitted)) out.push_back(v.name);
    return out;
}

}  // namespace

TEST(SharedContainment, SecondParentIsKeptAndWalkedOnce) {
    Graph g;
    g.load_jgf(tiered_jgf());
    EXPECT_TRUE(g.has_shared_children());
    int l1 = g.find_path("/cluster0/l2unit0/l1unit0");
    ASSERT_GE(l1, 0);
    // The first containment edge (from rack0) stays the parent.
    EXPECT_EQ(g.vertices[static_cast<size_t>(g.parent(l1))].name, "rack0");
    std::vector<int> all;
    g.subtree(g.root, all);
    EXPECT_EQ(all.size(), 8u);  // l1unit0 and its ssds listed once
}

TEST(SharedContainment, StorageIsMatchedThroughEitherParent) {
    MatcherOptions o;
    o.policy = "high";
    Matcher m(tiered_jgf(), o);
    MatchResult a = m.match(kL2Job, "allocate", std::nullopt, "simple");
    ASSERT_EQ(a.status, "allocated") << a.error;
    std::vector<std::string> got = names(m, a);
    // One ssd (512 units) under l1unit0, reached from l2unit0.
    std::vector<std::string> want{"core0", "node0", "rack0", "ssd1", "l1unit0", "l2unit0", "cluster0"};
    EXPECT_EQ(got, want);
    // The L1 request needs both ssds, one is held by the L2 job: busy.
    MatchResult b = m.match(kL1Job, "allocate", std::nullopt, "simple");
    EXPECT_EQ(b.status, "busy");
    ASSERT_TRUE(m.cancel(a.jobid, false));
    MatchResult c = m.match(kL1Job, "allocate", std::nullopt, "simple");
    EXPECT_EQ(c.status, "allocated") << c.error;
    // find walks l1unit0 once although two parents lead to it.
    std::string found = m.find("status=up", "simple");
    EXPECT_EQ(found.find("ssd0"), found.rfind("ssd0")) << found;
}

TEST(SharedContainment, LoopsAndRepeatedEdgesAreRejected) {
    std::string loop = tiered_jgf();
    loop.insert(loop.rfind("]}}"), R"(,{"source":"5","target":"4"})");
    EXPECT_THROW({ Graph g; g.load_jgf(loop); }, InputError);
    std::string twice = tiered_jgf();
    twice.insert(twice.rfind("]}}"), R"(,{"source":"7","target":"4"})");
    EXPECT_THROW({ Graph g; g.load_jgf(twice); }, InputError);
}

TEST(SharedContainment, RemovingTheSharedUnitDetachesItFromBothParents) {
    Matcher m(tiered_jgf(), MatcherOptions{});
    m.remove("/cluster0/l2unit0/l1unit0");
    EXPECT_EQ(m.find("status=up", "simple").find("ssd"), std::string::npos);
    MatchResult r = m.match(kL2Job, "allocate", std::nullopt, "simple");
    EXPECT_NE(r.status, "allocated");
}
