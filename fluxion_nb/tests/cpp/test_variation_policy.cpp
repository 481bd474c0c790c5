// The variation policy: nodes ranked by their perf_class property.
#include <gtest/gtest.h>

#include <string>

#include "matcher.hpp"
#include "policies/policy.hpp"

using namespace fluxion;

namespace {

// cluster0 -> node0..node2, one core each.
std::string three_nodes() {
    std::string nodes = R"({"id":"0","metadata":{"type":"cluster","name":"cluster0","id":0,"paths":{"containment":"/cluster0"}}})";
    std::string edges;
    for (int n = 0; n < 3; ++n) {
        std::string np = "/cluster0/node" + std::to_string(n);
        std::string nid = std::to_string(1 + 2 * n), cid = std::to_string(2 + 2 * n);
        nodes += R"(,{"id":")" + nid + R"(","metadata":{"type":"node","name":"node)" + std::to_string(n) +
                 R"(","id":)" + std::to_string(n) + R"(,"rank":)" + std::to_string(n) +
                 R"(,"paths":{"containment":")" + np + R"("}}})";
        nodes += R"(,{"id":")" + cid + R"(","metadata":{"type":"core","name":"core0","id":0,"rank":)" +
                 std::to_string(n) + R"(,"paths":{"containment":")" + np + R"(/core0"}}})";
        edges += std::string(n ? "," : "") + R"({"source":"0","target":")" + nid + R"("},{"source":")" + nid +
                 R"(","target":")" + cid + R"("})";
    }
    return R"({"graph":{"nodes":[)" + nodes + R"(],"edges":[)" + edges + "]}}";
}

const char *kOneNode = R"({"version":1,"resources":[{"type":"node","count":1,"with":[
 {"type":"slot","count":1,"label":"t","with":[{"type":"core","count":1}]}]}],
 "tasks":[{"command":["x"],"slot":"t","count":{"per_slot":1}}],"attributes":{"system":{"duration":60}}})";

std::string node_of(const Matcher &m, const MatchResult &r) {
    std::vector<AllocatedVertex> vs = m.describe(r.emitted);
    return vs.empty() ? "" : vs.front().node;
}

}  // namespace

TEST(VariationPolicy, PerfClassIsReadLikeAnIntegerWithinRange) {
    EXPECT_EQ(perf_class_of({}), 9999);
    EXPECT_EQ(perf_class_of({{"perf_class", "3"}}), 3);
    EXPECT_EQ(perf_class_of({{"perf_class", " 12abc"}}), 12);
    EXPECT_EQ(perf_class_of({{"perf_class", "abc"}}), 9999);
    EXPECT_EQ(perf_class_of({{"perf_class", "-2"}}), 9999);
    EXPECT_EQ(perf_class_of({{"perf_class", "10000"}}), 9999);
    EXPECT_EQ(perf_class_of({{"perf_class", "99999999999999999999"}}), 9999);
}

TEST(VariationPolicy, LowestPerformanceClassIsChosenFirst) {
    MatcherOptions o;
    o.policy = "variation";
    Matcher m(three_nodes(), o);
    m.set_property("/cluster0/node0", "perf_class", "5");
    m.set_property("/cluster0/node1", "perf_class", "2");
    // node2 has no class: the worst.
    EXPECT_EQ(node_of(m, m.match(kOneNode, "allocate", std::nullopt, "simple")), "node1");
    EXPECT_EQ(node_of(m, m.match(kOneNode, "allocate", std::nullopt, "simple")), "node0");
    EXPECT_EQ(node_of(m, m.match(kOneNode, "allocate", std::nullopt, "simple")), "node2");
}
