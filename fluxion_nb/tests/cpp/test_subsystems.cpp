// JGF graphs with several subsystems, and `-S`: matching walks the tree of
// the dominant subsystem only; every vertex and path stays known.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "util/errors.hpp"
#include "graph/graph.hpp"
#include "input_error.hpp"
#include "matcher.hpp"
#include "graph/subsystems.hpp"

using namespace fluxion;

namespace {

using fluxion::test_errors::input_error_of;

// Containment: /c0 -> node0, node1 -> one core each.
// Power: /pp0 -> node0, node1, power0 (10 KW); node0 -> power1, node1 -> power2 (5 KW each).
std::string two_subsystem_jgf(const std::string &extra_nodes = "", const std::string &extra_edges = "") {
    auto v = [](const std::string &id, const std::string &type, const std::string &name, int rank, int size,
                const std::string &paths) {
        return R"({"id":")" + id + R"(","metadata":{"type":")" + type + R"(","name":")" + name +
               R"(","rank":)" + std::to_string(rank) + R"(,"size":)" + std::to_string(size) + R"(,"paths":{)" +
               paths + "}}}";
    };
    std::string nodes = v("0", "cluster", "c0", -1, 1, R"("containment":"/c0")") + "," +
                        v("1", "node", "node0", 0, 1, R"("containment":"/c0/node0","power":"/pp0/node0")") + "," +
                        v("2", "node", "node1", 1, 1, R"("containment":"/c0/node1","power":"/pp0/node1")") + "," +
                        v("3", "core", "core0", 0, 1, R"("containment":"/c0/node0/core0")") + "," +
                        v("4", "core", "core0", 1, 1, R"("containment":"/c0/node1/core0")") + "," +
                        v("5", "powerpanel", "pp0", -1, 1, R"("power":"/pp0")") + "," +
                        v("6", "power", "power0", -1, 10, R"("power":"/pp0/power0")") + "," +
                        v("7", "power", "power1", -1, 5, R"("power":"/pp0/node0/power1")") + "," +
                        v("8", "power", "power2", -1, 5, R"("power":"/pp0/node1/power2")") + extra_nodes;
    auto e = [](const char *s, const char *t, const char *ss) {
        std::string md = ss ? std::string(R"(,"metadata":{"subsystem":")") + ss + "\"}" : "";
        return std::string(R"({"source":")") + s + R"(","target":")" + t + "\"" + md + "}";
    };
    std::string edges = e("0", "1", "containment") + "," + e("0", "2", nullptr) + "," + e("1", "3", nullptr) + "," +
                        e("2", "4", "containment") + "," + e("5", "1", "power") + "," + e("5", "2", "power") + "," +
                        e("5", "6", "power") + "," + e("1", "7", "power") + "," + e("2", "8", "power") + extra_edges;
    return R"({"graph":{"nodes":[)" + nodes + R"(],"edges":[)" + edges + "]}}";
}

const char *kOneCore =
    R"({"version":1,"resources":[{"type":"slot","count":1,"label":"t","with":[{"type":"core","count":1}]}],
        "tasks":[{"command":["x"],"slot":"t","count":{"per_slot":1}}],"attributes":{"system":{"duration":60}}})";

// powerpanel -> node (exclusive) -> power: one node with its power feed.
const char *kPoweredNode =
    R"({"version":1,"resources":[{"type":"powerpanel","count":1,"with":[{"type":"slot","count":1,"label":"t",
        "with":[{"type":"node","count":1,"with":[{"type":"power","count":1}]}]}]}],
        "tasks":[{"command":["x"],"slot":"t","count":{"per_slot":1}}],"attributes":{"system":{"duration":60}}})";

MatcherOptions options(const std::string &subsystems) {
    MatcherOptions o;
    o.policy = "low";
    o.match_format = "simple";
    o.subsystems = subsystems;
    return o;
}

}  // namespace

TEST(Subsystems, NamesMapToSubsystemsDominantFirst) {
    EXPECT_EQ(match_subsystems("CA"), std::vector<std::string>{"containment"});
    EXPECT_EQ(match_subsystems("PA"), std::vector<std::string>{"power"});
    EXPECT_EQ(match_subsystems("c+pa"), (std::vector<std::string>{"containment", "power"}));
    EXPECT_EQ(match_subsystems("ALL").front(), "containment");
    // resource-query takes the names in upper or lower case only.
    EXPECT_THROW(match_subsystems("Pa"), InputError);
    EXPECT_NE(input_error_of([] { match_subsystems("XYZ"); }).find("unknown match subsystems 'XYZ'"),
              std::string::npos);
    EXPECT_THROW(Matcher(two_subsystem_jgf(), options("nope")), InputError);
}

TEST(Subsystems, ContainmentMatchingIgnoresThePowerTree) {
    Matcher m(two_subsystem_jgf(), options("CA"));
    MatchResult r = m.match(kOneCore, "allocate");
    ASSERT_EQ(r.status, "allocated");
    EXPECT_EQ(r.R, "      ---------core0[1:x]\n      ------node0[1:s]\n      ---c0[1:s]\n");
    // Power vertices are not reachable from the containment root.
    EXPECT_NE(m.match(kPoweredNode, "allocate").status, "allocated");
    // Paths of every subsystem name their vertex.
    m.set_status("/pp0/node1", false);
    EXPECT_FALSE(m.get_status("/c0/node1"));
    EXPECT_TRUE(m.get_status("/pp0/power0"));
    // Every vertex is reported, each under some path.
    for (const auto &u : m.usage()) EXPECT_FALSE(u.path.empty()) << u.name;
}

TEST(Subsystems, PowerMatchingWalksThePowerTree) {
    Matcher m(two_subsystem_jgf(), options("PA"));
    MatchResult r = m.match(kPoweredNode, "allocate");
    ASSERT_EQ(r.status, "allocated");
    EXPECT_EQ(r.R, "      ---------power1[5:x]\n      ------node0[1:x]\n      ---pp0[1:s]\n");
    r = m.match(kPoweredNode, "allocate");
    ASSERT_EQ(r.status, "allocated");
    EXPECT_NE(r.R.find("node1[1:x]"), std::string::npos);
    EXPECT_EQ(m.match(kPoweredNode, "allocate").status, "busy");
    // Cores are not in the power tree.
    EXPECT_NE(m.match(kOneCore, "allocate").status, "allocated");
    EXPECT_TRUE(m.cancel(1, false));
    // R names vertices by their power paths: replay and partial cancel work.
    MatchResult one = m.match(kPoweredNode, "allocate", std::nullopt, "jgf");
    ASSERT_EQ(one.status, "allocated");
    EXPECT_TRUE(m.partial_cancel_r(one.jobid, one.R, "jgf"));
    EXPECT_EQ(m.update_allocate(50, one.R, 0, 60, false).status, "allocated");
    EXPECT_TRUE(m.cancel(50, false));
    // The JGF writer names the subsystem of the edges and every path.
    r = m.match(kPoweredNode, "allocate", std::nullopt, "jgf");
    ASSERT_EQ(r.status, "allocated");
    EXPECT_NE(r.R.find(R"("metadata": {"subsystem": "power"})"), std::string::npos) << r.R;
    EXPECT_NE(r.R.find(R"("paths": {"containment": "/c0/node0", "power": "/pp0/node0"})"), std::string::npos) << r.R;
    EXPECT_NE(r.R.find(R"("paths": {"power": "/pp0/node0/power1"})"), std::string::npos) << r.R;
}

TEST(Subsystems, AuxiliarySubsystemsAreNotWalked) {
    // C+PA: containment dominates, so the power request finds nothing.
    Matcher m(two_subsystem_jgf(), options("C+PA"));
    EXPECT_NE(m.match(kPoweredNode, "allocate").status, "allocated");
    EXPECT_EQ(m.match(kOneCore, "allocate").status, "allocated");
}

TEST(Subsystems, ForeignChildrenKeepAVertexFromBeingALeaf) {
    Graph g;
    g.load_jgf(two_subsystem_jgf());
    EXPECT_EQ(g.subsystems, (std::vector<std::string>{"containment", "power"}));
    int node0 = g.find_path("/c0/node0");
    int core = g.find_path("/c0/node0/core0");
    ASSERT_GE(node0, 0);
    EXPECT_EQ(g.find_path("/pp0/node0"), node0);
    EXPECT_TRUE(g.vertices[static_cast<size_t>(node0)].foreign_children);
    EXPECT_FALSE(g.vertices[static_cast<size_t>(core)].foreign_children);
    EXPECT_EQ(g.path_in(node0, "power"), "/pp0/node0");
    EXPECT_EQ(g.path_in(core, "power"), "");
    EXPECT_EQ(g.parent(node0), g.root);  // the containment parent
}

TEST(Subsystems, BadSubsystemStructureIsAnInputError) {
    // The dominant subsystem needs a root.
    std::string contain_only =
        R"({"graph":{"nodes":[{"id":"0","metadata":{"type":"cluster","paths":{"containment":"/c0"}}}],"edges":[]}})";
    EXPECT_NE(input_error_of([&] { Matcher(contain_only, options("PA")); }).find("no power root"), std::string::npos);
    // One root per subsystem.
    std::string two_roots = two_subsystem_jgf(
        R"(,{"id":"9","metadata":{"type":"powerpanel","name":"pp1","paths":{"power":"/pp1"}}})");
    EXPECT_NE(input_error_of([&] { Matcher(two_roots, options("CA")); }).find("more than one power root"),
              std::string::npos);
    // A dominant edge may only join vertices of that subsystem.
    std::string stray = two_subsystem_jgf(
        "", R"(,{"source":"6","target":"3","metadata":{"subsystem":"containment"}})");
    EXPECT_NE(input_error_of([&] { Matcher(stray, options("CA")); }).find("has no containment path"),
              std::string::npos);
    // A power vertex no power edge reaches.
    std::string orphan = two_subsystem_jgf(
        R"(,{"id":"9","metadata":{"type":"power","name":"power9","paths":{"power":"/pp0/power9"}}})");
    EXPECT_NO_THROW(Matcher(orphan, options("CA")));
    EXPECT_NE(input_error_of([&] { Matcher(orphan, options("PA")); }).find("no power edge reaches it"),
              std::string::npos);
    // A path names one vertex, whatever its subsystem.
    std::string dup = two_subsystem_jgf(
        R"(,{"id":"9","metadata":{"type":"power","name":"power9","paths":{"power":"/pp0/power0"}}})");
    EXPECT_NE(input_error_of([&] { Matcher(dup, options("CA")); }).find("duplicate power path /pp0/power0"),
              std::string::npos);
    // A vertex in no subsystem, an empty path, a bad edge subsystem.
    std::string nowhere = two_subsystem_jgf(R"(,{"id":"9","metadata":{"type":"power","paths":{}}})");
    EXPECT_NE(input_error_of([&] { Matcher(nowhere, options("CA")); }).find("names no subsystem"),
              std::string::npos);
    std::string empty = two_subsystem_jgf(R"(,{"id":"9","metadata":{"type":"power","paths":{"power":""}}})");
    EXPECT_NE(input_error_of([&] { Matcher(empty, options("CA")); }).find("metadata.paths.power is empty"),
              std::string::npos);
    std::string bad_edge = two_subsystem_jgf("", R"(,{"source":"5","target":"6","metadata":{"subsystem":7}})");
    EXPECT_NE(input_error_of([&] { Matcher(bad_edge, options("CA")); }).find("metadata.subsystem"),
              std::string::npos);
}
