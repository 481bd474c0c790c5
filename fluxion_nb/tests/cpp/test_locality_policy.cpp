// The locality policy: the top-level candidates ranked by the run of
// consecutive scores (vertex ids) each belongs to, the run starting highest
// first, as flux-sched's greater_interval_first_t does; inside a run the sort
// leaves them in the order the walk found them.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "matcher.hpp"

using namespace fluxion;

namespace {

// cluster0 -> [rack0..rackR-1 ->] node0..nodeN-1 (ids 0..N-1 across racks),
// two cores each.
std::string cluster(int nodes, int racks = 0) {
    std::string vs, es;
    int next = 0;
    auto vertex = [&](const std::string &type, int id, const std::string &path) {
        std::string key = std::to_string(next++);
        if (!vs.empty()) vs += ",";
        vs += R"({"id":")" + key + R"(","metadata":{"type":")" + type + R"(","name":")" + type +
              std::to_string(id) + R"(","id":)" + std::to_string(id) + R"(,"paths":{"containment":")" + path +
              R"("}}})";
        return key;
    };
    auto edge = [&](const std::string &s, const std::string &t) {
        if (!es.empty()) es += ",";
        es += R"({"source":")" + s + R"(","target":")" + t + R"("})";
    };
    std::string root = vertex("cluster", 0, "/cluster0");
    int per_rack = racks ? nodes / racks : nodes;
    std::string parent = root, prefix = "/cluster0";
    for (int n = 0; n < nodes; ++n) {
        if (racks && n % per_rack == 0) {
            int r = n / per_rack;
            prefix = "/cluster0/rack" + std::to_string(r);
            parent = vertex("rack", r, prefix);
            edge(root, parent);
        }
        std::string np = prefix + "/node" + std::to_string(n);
        std::string node = vertex("node", n, np);
        edge(parent, node);
        for (int c = 0; c < 2; ++c) edge(node, vertex("core", c, np + "/core" + std::to_string(c)));
    }
    return R"({"graph":{"nodes":[)" + vs + R"(],"edges":[)" + es + "]}}";
}

std::string whole_nodes(int count) {
    return R"({"version":1,"resources":[{"type":"node","count":)" + std::to_string(count) +
           R"(,"exclusive":true,"with":[{"type":"slot","count":1,"label":"t","with":[{"type":"core","count":1}]}]}],
 "tasks":[{"command":["x"],"slot":"t","count":{"per_slot":1}}],"attributes":{"system":{"duration":60}}})";
}

std::set<std::string> nodes_of(const Matcher &m, const MatchResult &r) {
    std::set<std::string> out;
    for (const AllocatedVertex &v : m.describe(r.emitted))
        if (!v.node.empty()) out.insert(v.node);
    return out;
}

std::unique_ptr<Matcher> with_busy(const std::string &graph, const std::string &policy,
                                   const std::vector<std::string> &busy) {
    MatcherOptions o;
    o.policy = policy;
    auto m = std::make_unique<Matcher>(graph, o);
    std::vector<std::pair<std::string, int64_t>> held;
    for (const std::string &path : busy)
        for (int c = 0; c < 2; ++c) held.emplace_back(path + "/core" + std::to_string(c), 1);
    if (!held.empty()) m->hold(1000, held, 0, 60);
    return m;
}

using Nodes = std::set<std::string>;

}  // namespace

TEST(LocalityPolicy, OneRunOfFreeNodesIsTakenInTheOrderFound) {
    // Every node free: one run, all equal; high would take node7 first.
    auto pm = with_busy(cluster(8), "locality", {});
    Matcher &m = *pm;
    EXPECT_EQ(nodes_of(m, m.match(whole_nodes(1), "allocate", std::nullopt, "simple")), Nodes{"node0"});
    EXPECT_EQ(nodes_of(m, m.match(whole_nodes(2), "allocate", std::nullopt, "simple")), (Nodes{"node1", "node2"}));
    auto ph = with_busy(cluster(8), "high", {});
    Matcher &h = *ph;
    EXPECT_EQ(nodes_of(h, h.match(whole_nodes(1), "allocate", std::nullopt, "simple")), Nodes{"node7"});
}

TEST(LocalityPolicy, TheRunStartingHighestComesFirst) {
    // Free: 0-2, 4-5, 7. Runs start at 7, 4, 0: node7, then the first of 4-5.
    const std::vector<std::string> busy = {"/cluster0/node3", "/cluster0/node6"};
    auto pm = with_busy(cluster(8), "locality", busy);
    Matcher &m = *pm;
    EXPECT_EQ(nodes_of(m, m.match(whole_nodes(2), "allocate", std::nullopt, "simple")), (Nodes{"node4", "node7"}));
    // Free now: 0-2 and 5; node5's run starts higher, then the first two of 0-2.
    EXPECT_EQ(nodes_of(m, m.match(whole_nodes(3), "allocate", std::nullopt, "simple")),
              (Nodes{"node0", "node1", "node5"}));
    auto ph = with_busy(cluster(8), "high", busy);
    Matcher &h = *ph;
    EXPECT_EQ(nodes_of(h, h.match(whole_nodes(2), "allocate", std::nullopt, "simple")), (Nodes{"node5", "node7"}));
}

TEST(LocalityPolicy, RunsFollowNodeIdsAcrossRacks) {
    // rack0: node0-3, rack1: node4-7. Free: 0-1, 3-5, 7: the run 3-5 spans the
    // racks and starts below 7.
    auto pm = with_busy(cluster(8, 2), "locality", {"/cluster0/rack0/node2", "/cluster0/rack1/node6"});
    Matcher &m = *pm;
    EXPECT_EQ(nodes_of(m, m.match(whole_nodes(3), "allocate", std::nullopt, "simple")),
              (Nodes{"node3", "node4", "node7"}));
    // Left: 0-1 and 5. Needing three, a fourth job takes nothing.
    EXPECT_EQ(nodes_of(m, m.match(whole_nodes(3), "allocate", std::nullopt, "simple")),
              (Nodes{"node0", "node1", "node5"}));
    EXPECT_EQ(m.match(whole_nodes(1), "allocate", std::nullopt, "simple").status, "busy");
}

TEST(LocalityPolicy, TiesAmongManyCandidatesFallAsStdSortLeavesThem) {
    // Past 16 candidates std::sort partitions, moving equal elements: the
    // nodes taken are the first three std::sort leaves of 40 equal ones.
    std::vector<int> order(40);
    for (int i = 0; i < 40; ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [](int, int) { return false; });
    Nodes expected;
    for (int i = 0; i < 3; ++i) expected.insert("node" + std::to_string(order[i]));
    auto pm = with_busy(cluster(40), "locality", {});
    Matcher &m = *pm;
    EXPECT_EQ(nodes_of(m, m.match(whole_nodes(3), "allocate", std::nullopt, "simple")), expected);
}
