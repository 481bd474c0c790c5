#include <gtest/gtest.h>

#include "util/errors.hpp"
#include "traverser/find.hpp"
#include "matcher.hpp"

using namespace fluxion;

namespace {
// cluster0 -> node0,node1 -> socket -> two cores each; node1 has a property.
std::string small_graph() {
    std::string nodes, edges;
    int id = 0;
    auto vtx = [&](const std::string &type, const std::string &name, int64_t idx, const std::string &path,
                   const std::string &extra) {
        if (!nodes.empty()) nodes += ",";
        nodes += "{\"id\":\"" + std::to_string(id) + "\",\"metadata\":{\"type\":\"" + type + "\",\"name\":\"" +
                 name + "\",\"id\":" + std::to_string(idx) + extra + ",\"paths\":{\"containment\":\"" + path +
                 "\"}}}";
        return id++;
    };
    auto edge = [&](int s, int t) {
        if (!edges.empty()) edges += ",";
        edges += "{\"source\":\"" + std::to_string(s) + "\",\"target\":\"" + std::to_string(t) + "\"}";
    };
    int root = vtx("cluster", "cluster0", 0, "/cluster0", "");
    for (int n = 0; n < 2; ++n) {
        std::string np = "/cluster0/node" + std::to_string(n);
        std::string extra = ",\"rank\":" + std::to_string(n) + (n == 1 ? ",\"properties\":{\"gpu-ready\":\"\"}" : "");
        int nv = vtx("node", "node" + std::to_string(n), n, np, extra);
        edge(root, nv);
        int sv = vtx("socket", "socket0", 0, np + "/socket0", "");
        edge(nv, sv);
        for (int c = 0; c < 2; ++c)
            edge(sv, vtx("core", "core" + std::to_string(c), c, np + "/socket0/core" + std::to_string(c), ""));
    }
    return "{\"graph\":{\"nodes\":[" + nodes + "],\"edges\":[" + edges + "]}}";
}

const char *kNode =
    R"({"version":1,"resources":[{"type":"slot","count":1,"label":"t",
        "with":[{"type":"core","count":2}]}],
        "tasks":[{"command":["x"],"slot":"t","count":{"per_slot":1}}],"attributes":{"system":{"duration":60}}})";

Matcher make(const std::string &prune = "ALL:core,ALL:node") {
    return Matcher(small_graph(), MatcherOptions{"low", prune, "simple", {}});
}
}  // namespace

TEST(FindCriteria, RejectsUnknownPredicatesAndBadValues) {
    EXPECT_THROW(FindCriteria::parse("colour=red"), InputError);
    EXPECT_THROW(FindCriteria::parse("status=sideways"), InputError);
    EXPECT_THROW(FindCriteria::parse("jobid-alloc=abc"), InputError);
    EXPECT_THROW(FindCriteria::parse("status=up and"), InputError);
    EXPECT_THROW(FindCriteria::parse("(status=up"), InputError);
    EXPECT_THROW(FindCriteria::parse(""), InputError);
    EXPECT_THROW(FindCriteria::parse("names=n[0-99999999999999999999]"), InputError);
    EXPECT_NO_THROW(FindCriteria::parse("(status=up or status=down) and sched-now=free"));
}

TEST(FindCriteria, RemembersLastJobidAndAgfilter) {
    auto c = FindCriteria::parse("jobid-alloc=3 agfilter=t");
    EXPECT_EQ(c.jobid(), 3);
    EXPECT_TRUE(c.agfilter());
    EXPECT_FALSE(FindCriteria::parse("agfilter=t and agfilter=false").agfilter());
}

TEST(Find, EmptyGraphStateMatchesNothingAllocated) {
    Matcher m = make();
    EXPECT_EQ(m.find("sched-now=allocated"), "");
}

TEST(Find, AllocatedVerticesComeWithTheirAncestorsAllExclusive) {
    Matcher m = make();
    auto res = m.match(kNode, "allocate");
    ASSERT_EQ(res.status, "allocated") << res.error;
    EXPECT_EQ(m.find("sched-now=allocated"),
              "      ------------core0[1:x]\n"
              "      ------------core1[1:x]\n"
              "      ---------socket0[1:x]\n"
              "      ------node0[1:x]\n"
              "      ---cluster0[1:x]\n");
    // Only the cores hold the job: node0 and its socket are free themselves.
    EXPECT_EQ(m.find("sched-now=free"),
              "      ---------socket0[1:x]\n"
              "      ------node0[1:x]\n"
              "      ------------core0[1:x]\n"
              "      ------------core1[1:x]\n"
              "      ---------socket0[1:x]\n"
              "      ------node1[1:x]\n"
              "      ---cluster0[1:x]\n");
}

TEST(Find, DownStatusIsInheritedBySubtree) {
    Matcher m = make();
    m.set_status("/cluster0/node1", false);
    std::string r = m.find("status=down");
    EXPECT_NE(r.find("node1[1:x]"), std::string::npos);
    EXPECT_NE(r.find("core0[1:x]"), std::string::npos);
    EXPECT_EQ(r.find("node0"), std::string::npos);
}

TEST(Find, NamesPropertyAndOrFoldLeftToRight) {
    Matcher m = make();
    EXPECT_EQ(m.find("names=node[0-1] and status=down"), "");
    std::string r = m.find("names=node[0-1]");
    EXPECT_NE(r.find("node0[1:x]"), std::string::npos);
    EXPECT_NE(r.find("node1[1:x]"), std::string::npos);
    EXPECT_EQ(r.find("core0"), std::string::npos);
    EXPECT_EQ(m.find("property=gpu-ready"), "      ------node1[1:x]\n      ---cluster0[1:x]\n");
    // (false or true) and true, not false or (true and true) -- same here, and
    // "true or x and false" folds to false.
    EXPECT_EQ(m.find("status=up or status=down and names=nowhere"), "");
}

TEST(Find, AgfilterReportsAggregateUsageInJgf) {
    Matcher m = make();
    auto res = m.match(kNode, "allocate");
    ASSERT_EQ(res.status, "allocated") << res.error;
    std::string r = m.find("agfilter=t", "jgf");
    EXPECT_NE(r.find(R"("agfilter": {"core": "used:2, total:4", "node": "used:0, total:2"})"), std::string::npos);
    // Only vertices that carry a filter are reported.
    EXPECT_EQ(r.find("\"type\": \"core\""), std::string::npos);
    std::string j = m.find("jobid-span=1 agfilter=t", "jgf");
    EXPECT_NE(j.find(R"("agfilter": {"core": "used:2, total:2"})"), std::string::npos);
    EXPECT_EQ(m.find("jobid-alloc=7 agfilter=t", "jgf"), "");
}

TEST(Find, UnknownFormatIsAnInputError) {
    Matcher m = make();
    EXPECT_THROW(m.find("status=up", "yaml"), InputError);
}

TEST(Find, CancelCountsTheWalk) {
    Matcher m = make();
    auto res = m.match(kNode, "allocate");
    ASSERT_EQ(res.status, "allocated") << res.error;
    m.cancel(1, false);
    auto counts = m.traversal_counts();
    // cluster0, node0, socket0, 2 cores finished; node1 entered only.
    EXPECT_EQ(counts.first, 6u);
    EXPECT_EQ(counts.second, 5u);
}

TEST(Status, MarkingAPathChangesThatVertexAloneAsFluxionDoes) {
    Matcher m = make();
    m.set_status("/cluster0/node0/socket0", false);
    m.set_status("/cluster0/node0", false);
    // Descendants keep their own status: a core under the down node still reads up.
    EXPECT_FALSE(m.get_status("/cluster0/node0"));
    EXPECT_TRUE(m.get_status("/cluster0/node0/socket0/core0"));
    // Bringing the node back does not bring back the socket marked down on its own.
    m.set_status("/cluster0/node0", true);
    EXPECT_TRUE(m.get_status("/cluster0/node0"));
    EXPECT_FALSE(m.get_status("/cluster0/node0/socket0"));
    // Matching never descends below a down vertex: node0's cores are out of reach.
    auto first = m.match(kNode, "allocate");
    ASSERT_EQ(first.status, "allocated") << first.error;
    EXPECT_NE(first.R.find("node1"), std::string::npos);
    auto second = m.match(kNode, "allocate");
    EXPECT_NE(second.status, "allocated");
    m.set_status("/cluster0/node0/socket0", true);
    auto third = m.match(kNode, "allocate");
    ASSERT_EQ(third.status, "allocated") << third.error;
    EXPECT_NE(third.R.find("node0"), std::string::npos);
}

TEST(Status, AClusterDownHidesEveryNodeAndUpIsIdempotent) {
    Matcher m = make();
    m.set_status("/cluster0", false);
    m.set_status("/cluster0", false);  // no change the second time
    EXPECT_TRUE(m.get_status("/cluster0/node1"));
    EXPECT_NE(m.match(kNode, "allocate").status, "allocated");
    m.set_status("/cluster0", true);
    m.set_status("/cluster0", true);
    auto res = m.match(kNode, "allocate");
    EXPECT_EQ(res.status, "allocated") << res.error;
}
