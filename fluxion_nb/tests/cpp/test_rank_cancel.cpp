// Partial cancel by broker rank (R read as flux-sched's rv1exec reader reads
// it), and when the ancestors of what is released let go of the job.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "util/errors.hpp"
#include "matcher.hpp"
#include "readers/rv1exec.hpp"

using namespace fluxion;

namespace {

// cluster0 -> node0..node2 (rank = node number) -> core0, core1.
std::string ranked_jgf() {
    std::string nodes, edges;
    int id = 0;
    auto vtx = [&](const std::string &type, const std::string &name, int rank, const std::string &path) {
        if (!nodes.empty()) nodes += ",";
        nodes += R"({"id":")" + std::to_string(id) + R"(","metadata":{"type":")" + type + R"(","name":")" + name +
                 R"(","rank":)" + std::to_string(rank) + R"(,"paths":{"containment":")" + path + R"("}}})";
        return id++;
    };
    auto edge = [&](int s, int t) {
        if (!edges.empty()) edges += ",";
        edges += R"({"source":")" + std::to_string(s) + R"(","target":")" + std::to_string(t) + R"("})";
    };
    int root = vtx("cluster", "cluster0", -1, "/cluster0");
    for (int n = 0; n < 3; ++n) {
        std::string np = "/cluster0/node" + std::to_string(n);
        int nv = vtx("node", "node" + std::to_string(n), n, np);
        edge(root, nv);
        for (int c = 0; c < 2; ++c) edge(nv, vtx("core", "core" + std::to_string(c), n, np + "/core" + std::to_string(c)));
    }
    return R"({"graph":{"nodes":[)" + nodes + R"(],"edges":[)" + edges + "]}}";
}

std::string nodes_with_cores(int n) {
    return R"({"version":1,"resources":[{"type":"slot","count":)" + std::to_string(n) +
           R"(,"label":"t","with":[{"type":"node","count":1,"with":[{"type":"core","count":2}]}]}],
        "tasks":[{"command":["x"],"slot":"t","count":{"per_slot":1}}],"attributes":{"system":{"duration":60}}})";
}

std::string bare_nodes(int n) {
    return R"({"version":1,"resources":[{"type":"slot","count":)" + std::to_string(n) +
           R"(,"label":"t","with":[{"type":"node","count":1}]}],
        "tasks":[{"command":["x"],"slot":"t","count":{"per_slot":1}}],"attributes":{"system":{"duration":60}}})";
}

std::string r_ranks(const std::string &ranks) {
    return R"({"version":1,"execution":{"R_lite":[{"rank":")" + ranks +
           R"(","children":{"core":"0-1"}}],"nodelist":["node0"],"starttime":0,"expiration":60}})";
}

int64_t used(const Matcher &m) {
    int64_t sum = 0;
    for (const auto &u : m.usage()) sum += u.used;
    return sum;
}

MatcherOptions low(const std::string &prune = "ALL:core,ALL:node") {
    MatcherOptions o;
    o.policy = "low";
    o.match_format = "simple";
    o.prune_filters = prune;
    return o;
}

}  // namespace

TEST(RankCancel, RLiteRanksAreRead) {
    EXPECT_EQ(r_lite_ranks(r_ranks("17-19")), (std::set<int64_t>{17, 18, 19}));
    EXPECT_THROW(r_lite_ranks(r_ranks("-1")), InputError);
    EXPECT_THROW(r_lite_ranks(R"({"version":2,"execution":{"R_lite":[]}})"), InputError);
    EXPECT_THROW(r_lite_ranks(R"({"version":1})"), InputError);
    EXPECT_THROW(r_lite_ranks(R"({"version":1,"execution":{"R_lite":[{"children":{}}]}})"), InputError);
    EXPECT_THROW(r_lite_ranks("[1"), InputError);
}

TEST(RankCancel, ReleasesEveryVertexOfTheRanks) {
    Matcher m(ranked_jgf(), low());
    ASSERT_EQ(m.match(nodes_with_cores(2), "allocate").status, "allocated");  // node0, node1
    EXPECT_EQ(used(m), 6);
    EXPECT_FALSE(m.partial_cancel_r(1, r_ranks("1"), "rv1exec"));
    EXPECT_EQ(used(m), 3);
    EXPECT_EQ(m.info(1)->state, "ALLOCATED");
    // The freed node can be matched again; the job's other node cannot.
    MatchResult r = m.match(nodes_with_cores(2), "allocate");
    ASSERT_EQ(r.status, "allocated");
    EXPECT_NE(r.R.find("node1"), std::string::npos);
    EXPECT_NE(r.R.find("node2"), std::string::npos);
    EXPECT_TRUE(m.partial_cancel_r(1, r_ranks("0"), "rv1exec"));
    EXPECT_EQ(m.info(1)->state, "CANCELED");
    EXPECT_EQ(used(m), 6);  // job 2 only
}

TEST(RankCancel, BadRanksChangeNothing) {
    Matcher m(ranked_jgf(), low());
    ASSERT_EQ(m.match(nodes_with_cores(1), "allocate").status, "allocated");  // node0
    EXPECT_THROW(m.partial_cancel_r(1, r_ranks("0,7"), "rv1exec"), NotFoundError);
    EXPECT_THROW(m.partial_cancel_r(1, r_ranks("0-1"), "rv1exec"), InputError);  // nothing held on 1
    EXPECT_THROW(m.partial_cancel_r(1, r_ranks("0"), "hwloc"), InputError);
    EXPECT_THROW(m.partial_cancel_r(9, r_ranks("0"), "rv1exec"), NotFoundError);
    // An R without a JGF graph is not a jgf R.
    EXPECT_THROW(m.partial_cancel_r(1, r_ranks("0"), "jgf"), InputError);
    EXPECT_EQ(used(m), 3);
    EXPECT_EQ(m.info(1)->state, "ALLOCATED");
}

TEST(RankCancel, ReservationsAreNotPartiallyCancelled) {
    Matcher m(ranked_jgf(), low());
    ASSERT_EQ(m.match(nodes_with_cores(3), "allocate").status, "allocated");
    ASSERT_EQ(m.match(nodes_with_cores(1), "allocate_orelse_reserve").status, "reserved");
    EXPECT_THROW(m.partial_cancel_r(2, r_ranks("0"), "rv1exec"), StateError);
}

TEST(RankCancel, AncestorsWithoutTheJobsAggregateKeepItsTag) {
    // As flux-sched: an ancestor lets go of the job only when its aggregate
    // span of the job empties. With core the only pruning type, a job of
    // bare nodes leaves no span on the cluster, so releasing all its nodes
    // does not end it; a full cancel still does.
    Matcher m(ranked_jgf(), low("ALL:core"));
    ASSERT_EQ(m.match(bare_nodes(2), "allocate").status, "allocated");
    EXPECT_FALSE(m.partial_cancel_r(1, r_ranks("0-1"), "rv1exec"));
    EXPECT_EQ(m.info(1)->state, "ALLOCATED");
    EXPECT_EQ(m.find("jobid-tag=1"), "      ---cluster0[1:x]\n");
    EXPECT_EQ(m.match(bare_nodes(3), "allocate").status, "allocated");
    EXPECT_TRUE(m.cancel(1, false));
    // With node tracked, the same release ends the job.
    Matcher n(ranked_jgf(), low());
    ASSERT_EQ(n.match(bare_nodes(2), "allocate").status, "allocated");
    EXPECT_TRUE(n.partial_cancel_r(1, r_ranks("0-1"), "rv1exec"));
    EXPECT_EQ(n.find("jobid-tag=1"), "");
}
