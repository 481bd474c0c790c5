// update_allocate of an rv1exec R (RFC 20 R_lite + nodelist, no JGF): the
// vertices are found by rank, host and child type + id, as flux-sched's
// rv1exec reader finds them, then held as a replayed allocation.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

#include "matcher.hpp"
#include "pool_graph.hpp"
#include "readers/rv1exec.hpp"
#include "util/errors.hpp"

using namespace fluxion;

namespace {

// cluster0 -> node0, node1 (rank = node number) -> core0..3, gpu0..1, every
// vertex of size 1; with `sockets`, a socket0 between each node and its children.
std::string ranked_graph(bool sockets = false) {
    test_graphs::JgfBuilder b;
    int root = b.vertex("cluster", "cluster0", 0, "/cluster0", 1);
    for (int n = 0; n < 2; ++n) {
        std::string np = "/cluster0/node" + std::to_string(n);
        int node = b.vertex("node", "node" + std::to_string(n), n, np, 1, n);
        b.edge(root, node);
        int parent = node;
        std::string pp = np;
        if (sockets) {
            pp = np + "/socket0";
            parent = b.vertex("socket", "socket0", 0, pp, 1, n);
            b.edge(node, parent);
        }
        for (int c = 0; c < 4; ++c)
            b.edge(parent, b.vertex("core", "core" + std::to_string(c), c, pp + "/core" + std::to_string(c), 1, n));
        for (int g = 0; g < 2; ++g)
            b.edge(parent, b.vertex("gpu", "gpu" + std::to_string(g), g, pp + "/gpu" + std::to_string(g), 1, n));
    }
    return b.text();
}

// As flux-sched's tests write it: starttime and expiration that the update ignores.
std::string rv1(const std::string &entries, const std::string &nodelist) {
    return R"({"version":1,"execution":{"R_lite":[)" + entries + R"(],"nodelist":[)" + nodelist +
           R"(],"starttime":5,"expiration":10}})";
}

std::string entry(const std::string &rank, const std::string &children) {
    return R"({"rank":")" + rank + R"(","children":{)" + children + "}}";
}

// `cores` cores on one node, the node shared.
std::string cores_on_a_node(int cores) {
    return R"({"version":1,"resources":[{"type":"node","count":1,"with":[{"type":"slot","count":1,"label":"t",
        "with":[{"type":"core","count":)" +
           std::to_string(cores) + R"(}]}]}],
        "tasks":[{"command":["x"],"slot":"t","count":{"per_slot":1}}],"attributes":{"system":{"duration":3600}}})";
}

std::string whole_nodes(int n) {
    return R"({"version":1,"resources":[{"type":"slot","count":)" + std::to_string(n) +
           R"(,"label":"t","with":[{"type":"node","count":1}]}],
        "tasks":[{"command":["x"],"slot":"t","count":{"per_slot":1}}],"attributes":{"system":{"duration":3600}}})";
}

MatcherOptions opts(const std::string &format = "rv1_nosched") {
    MatcherOptions o;
    o.policy = "low";
    o.match_format = format;
    return o;
}

// path -> units held now (or at `at`).
std::map<std::string, int64_t> used(const Matcher &m, int64_t at = 0) {
    std::map<std::string, int64_t> out;
    for (const auto &u : m.usage(at))
        if (u.used) out[u.path] = u.used;
    return out;
}

// path -> held exclusively, for what a match or update emitted.
std::map<std::string, bool> held(const Matcher &m, const MatchResult &r) {
    std::map<std::string, bool> out;
    for (const auto &a : m.describe(r.emitted)) out[a.path] = a.exclusive;
    return out;
}

const std::string kNode0 = "/cluster0/node0";

}  // namespace

TEST(Rv1execRead, RanksTakeTheirHostsByPositionInIncreasingRankOrder) {
    auto ranks = read_rv1exec(rv1(entry("7", R"("core":"1")") + "," + entry("3-4", R"("core":"0-1","gpu":"0")"),
                                  R"("a[1-2]","b")"));
    ASSERT_EQ(ranks.size(), 3u);
    EXPECT_EQ(ranks[0].rank, 3);
    EXPECT_EQ(ranks[0].host, "a1");
    EXPECT_EQ(ranks[1].host, "a2");
    EXPECT_EQ(ranks[2].rank, 7);
    EXPECT_EQ(ranks[2].host, "b");
    ASSERT_EQ(ranks[0].children.size(), 2u);
    EXPECT_EQ(ranks[0].children[0].first, "core");
    EXPECT_EQ(ranks[0].children[0].second, (std::set<int64_t>{0, 1}));
    EXPECT_EQ(ranks[0].children[1].first, "gpu");
}

TEST(Rv1execRead, MalformedRIsAnInputError) {
    const std::string ok = entry("0", R"("core":"0")");
    EXPECT_THROW(read_rv1exec(R"({"version":2,"execution":{"R_lite":[],"nodelist":[]}})"), InputError);
    EXPECT_THROW(read_rv1exec(R"({"version":1,"execution":{"R_lite":[)" + ok + "]}}"), InputError);  // no nodelist
    EXPECT_THROW(read_rv1exec(rv1(ok, "")), InputError);                        // fewer hosts than ranks
    EXPECT_THROW(read_rv1exec(rv1(entry("0", R"("core":0)"), R"("n0")")), InputError);  // ids not an idset
    EXPECT_THROW(read_rv1exec(rv1(R"({"rank":0,"children":{}})", R"("n0")")), InputError);
    EXPECT_THROW(read_rv1exec(rv1(R"({"rank":"0"})", R"("n0")")), InputError);       // no children
    EXPECT_THROW(read_rv1exec(rv1(ok, R"("n[0-")")), InputError);
}

TEST(Rv1execUpdate, ReplaysAnAllocationWrittenAsRv1exec) {
    Matcher m(ranked_graph(), opts());
    MatchResult a = m.match(cores_on_a_node(2), "allocate");
    ASSERT_EQ(a.status, "allocated");
    ASSERT_EQ(a.R.find("scheduling"), std::string::npos) << a.R;
    // The same vertices come back; the node, shared by the match, is held
    // exclusively by the replay (flux-sched marks every vertex R names so).
    auto before = held(m, a);
    ASSERT_FALSE(before.at(kNode0));
    before[kNode0] = true;
    const auto usage = used(m);
    ASSERT_TRUE(m.cancel(a.jobid, false));
    ASSERT_TRUE(used(m).empty());

    MatchResult u = m.update_allocate(a.jobid, a.R, 0, 3600, false, "", "rv1exec");
    EXPECT_EQ(u.status, "allocated");
    EXPECT_EQ(held(m, u), before);
    EXPECT_EQ(used(m), usage);
    EXPECT_EQ(u.R, a.R);  // same vertices, same time: written the same
    EXPECT_EQ(m.next_jobid(), a.jobid + 1);
    EXPECT_EQ(m.info(a.jobid)->state, "ALLOCATED");

    // Told no reader, an R without JGF is read as rv1exec.
    Matcher n(ranked_graph(), opts());
    EXPECT_EQ(held(n, n.update_allocate(a.jobid, a.R, 0, 3600, false)), before);

    // A later match avoids what the replay holds.
    MatchResult b = m.match(cores_on_a_node(2), "allocate");
    ASSERT_EQ(b.status, "allocated");
    for (const auto &kv : held(m, b))
        if (kv.first.find("core") != std::string::npos) EXPECT_EQ(before.count(kv.first), 0u) << kv.first;
}

TEST(Rv1execUpdate, TheNodeIsPlannedOnlyWhenItsWholeRankIsNamed) {
    // Cores pruned only: every replay counts its node whole in the cluster's
    // node aggregate (it is held exclusively), which would prune node1 below.
    MatcherOptions o = opts();
    o.prune_filters = "ALL:core";
    Matcher m(ranked_graph(), o);
    // Part of rank 0: the node is emitted exclusive, its own planner stays free.
    MatchResult part = m.update_allocate(1, rv1(entry("0", R"("core":"0-1")"), R"("node0")"), 0, 3600, false);
    EXPECT_EQ(held(m, part), (std::map<std::string, bool>{{"/cluster0", false},
                                                          {kNode0, true},
                                                          {kNode0 + "/core0", true},
                                                          {kNode0 + "/core1", true}}));
    EXPECT_EQ(used(m).count(kNode0), 0u);
    // So another job may take the rest of node0.
    m.update_allocate(2, rv1(entry("0", R"("core":"2-3","gpu":"0-1")"), R"("node0")"), 0, 3600, false);
    EXPECT_EQ(used(m).count(kNode0), 0u);
    // But the node is no longer free as a whole.
    MatchResult whole = m.match(whole_nodes(1), "allocate");
    ASSERT_EQ(whole.status, "allocated");
    EXPECT_EQ(held(m, whole).count("/cluster0/node1"), 1u);
    EXPECT_EQ(m.match(whole_nodes(1), "allocate").status, "busy");

    // All of rank 1 (every core and gpu): the node's planner is spanned too.
    Matcher n(ranked_graph(), opts());
    n.update_allocate(4, rv1(entry("1", R"("core":"0-3","gpu":"0-1")"), R"("node1")"), 0, 3600, false);
    EXPECT_EQ(used(n).at("/cluster0/node1"), 1);
    EXPECT_EQ(n.next_jobid(), 5);
    // And a cancel gives everything back.
    EXPECT_TRUE(n.cancel(4, false));
    EXPECT_TRUE(used(n).empty());
    EXPECT_EQ(n.match(whole_nodes(2), "allocate").status, "allocated");
}

TEST(Rv1execUpdate, ReservesAtTheGivenTimeNotRsOwn) {
    Matcher m(ranked_graph(), opts());
    const std::string R = rv1(entry("0-1", R"("core":"0")"), R"("node[0-1]")");
    MatchResult r = m.update_allocate(3, R, 1000, 600, true, "", "rv1exec");
    EXPECT_EQ(r.status, "reserved");
    EXPECT_EQ(r.at, 1000);
    EXPECT_EQ(r.duration, 600);
    EXPECT_NE(r.R.find("\"starttime\": 1000,"), std::string::npos) << r.R;
    EXPECT_NE(r.R.find("\"expiration\": 1600}"), std::string::npos) << r.R;
    auto info = m.info(3);
    ASSERT_TRUE(info);
    EXPECT_EQ(info->state, "RESERVED");
    EXPECT_EQ(info->at, 1000);
    EXPECT_TRUE(used(m, 0).empty());
    EXPECT_EQ(used(m, 1000), (std::map<std::string, int64_t>{{kNode0 + "/core0", 1}, {"/cluster0/node1/core0", 1}}));
    // An allocation now that ends before the reservation starts may use them.
    EXPECT_EQ(m.update_allocate(4, R, 0, 1000, false).status, "allocated");
    // One that overlaps it may not.
    EXPECT_THROW(m.update_allocate(5, R, 500, 1000, false), StateError);
}

TEST(Rv1execUpdate, WhatTheGraphLacksFailsAndChangesNothing) {
    Matcher m(ranked_graph(), opts());
    m.update_allocate(1, rv1(entry("0", R"("core":"0")"), R"("node0")"), 0, 3600, false);
    const auto before = used(m);
    const std::string node0_core1 = entry("0", R"("core":"1")");
    auto unchanged = [&] {
        EXPECT_EQ(used(m), before);
        EXPECT_FALSE(m.info(2));
        EXPECT_EQ(m.next_jobid(), 2);
    };
    // A rank the graph has not (its host is not there either).
    EXPECT_THROW(m.update_allocate(2, rv1(node0_core1 + "," + entry("7", R"("core":"0")"), R"("node0","node7")"), 0,
                                   60, false),
                 NotFoundError);
    unchanged();
    // A host that is not at that rank.
    EXPECT_THROW(m.update_allocate(2, rv1(entry("0", R"("core":"1")"), R"("node1")"), 0, 60, false), InputError);
    unchanged();
    // A child id or type the node lacks, after ones it has.
    EXPECT_THROW(m.update_allocate(2, rv1(entry("0", R"("core":"1-9")"), R"("node0")"), 0, 60, false),
                 NotFoundError);
    EXPECT_THROW(m.update_allocate(2, rv1(entry("0", R"("core":"1","asic":"0")"), R"("node0")"), 0, 60, false),
                 NotFoundError);
    unchanged();
    // A unit named twice, and one another job holds.
    EXPECT_THROW(m.update_allocate(2, rv1(node0_core1 + "," + node0_core1, R"("node0")"), 0, 60, false),
                 InputError);
    EXPECT_THROW(m.update_allocate(2, rv1(entry("0", R"("core":"0-1")"), R"("node0")"), 0, 60, false), StateError);
    unchanged();
    // Nothing was left half-held: the rest of the graph is still whole.
    EXPECT_EQ(m.match(whole_nodes(1), "allocate").status, "allocated");
    MatchResult ok = m.update_allocate(9, rv1(node0_core1, R"("node0")"), 0, 60, false);
    EXPECT_EQ(ok.status, "allocated");
}

TEST(Rv1execUpdate, OnlyVerticesRightUnderTheNodeAreFound) {
    // flux-sched looks a child up at <node path>/<type><id>: cores under sockets are not there.
    Matcher m(ranked_graph(true), opts());
    // What the rv1 writers write for two cores of node0.
    const std::string R = rv1(entry("0", R"("core":"0-1")"), R"("node0")");
    EXPECT_THROW(m.update_allocate(1, R, 0, 3600, false, "", "rv1exec"), NotFoundError);
    EXPECT_TRUE(used(m).empty());
    EXPECT_FALSE(m.info(1));
}

TEST(Rv1execUpdate, PooledChildrenAreNotSingleResources) {
    // A Kubernetes-shaped node: one core vertex of size 4 (flux-sched looks for size 1).
    test_graphs::JgfBuilder b;
    int root = b.vertex("cluster", "cluster0", 0, "/cluster0", 1);
    int node = b.vertex("node", "node0", 0, kNode0, 1, 0);
    b.edge(root, node);
    b.edge(node, b.vertex("core", "core0", 0, kNode0 + "/core0", 4, 0));
    Matcher m(b.text(), opts());
    EXPECT_THROW(m.update_allocate(1, rv1(entry("0", R"("core":"0")"), R"("node0")"), 0, 60, false), InputError);
    EXPECT_TRUE(used(m).empty());
    EXPECT_FALSE(m.info(1));
}

TEST(Rv1execUpdate, TheReaderIsChosenByName) {
    Matcher m(ranked_graph(), opts());
    const std::string R = rv1(entry("0", R"("core":"0")"), R"("node0")");
    EXPECT_THROW(m.update_allocate(1, R, 0, 60, false, "", "jgf"), InputError);  // no JGF in it
    EXPECT_THROW(m.update_allocate(1, R, 0, 60, false, "", "hwloc"), InputError);
    EXPECT_TRUE(used(m).empty());
    // An rv1 R (R_lite and JGF) read as rv1exec takes what R_lite names.
    Matcher n(ranked_graph(), opts("rv1"));
    MatchResult a = n.match(cores_on_a_node(1), "allocate");
    ASSERT_NE(a.R.find("scheduling"), std::string::npos);
    auto before = held(n, a);
    before[kNode0] = true;
    ASSERT_TRUE(n.cancel(a.jobid, false));
    EXPECT_EQ(held(n, n.update_allocate(a.jobid, a.R, 0, 3600, false, "", "rv1exec")), before);
}
