// Readers given hostile input: each case must end in a typed error (or a
// clean result) and leave the graph and the job table as they were.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "util/errors.hpp"
#include "graph/graph.hpp"
#include "jobspec/jobspec.hpp"
#include "util/json.hpp"
#include "input_error.hpp"
#include "matcher.hpp"
#include "pool_graph.hpp"

using namespace fluxion;

namespace {

using fluxion::test_errors::input_error_of;

// cluster0 -> rack0 -> node0..node1 -> socket0 -> core0..core1.
std::string rack_jgf() {
    test_graphs::JgfBuilder b;
    auto vtx = [&](const std::string &type, const std::string &name, int64_t idx, const std::string &path,
                   int64_t rank) { return b.vertex(type, name, idx, path, -1, rank); };
    int root = vtx("cluster", "cluster0", 0, "/cluster0", -1);
    int rack = vtx("rack", "rack0", 0, "/cluster0/rack0", -1);
    b.edge(root, rack);
    for (int n = 0; n < 2; ++n) {
        std::string np = "/cluster0/rack0/node" + std::to_string(n);
        int nv = vtx("node", "node" + std::to_string(n), n, np, n);
        b.edge(rack, nv);
        int sv = vtx("socket", "socket0", 0, np + "/socket0", n);
        b.edge(nv, sv);
        for (int c = 0; c < 2; ++c)
            b.edge(sv, vtx("core", "core" + std::to_string(c), c, np + "/socket0/core" + std::to_string(c), n));
    }
    return b.text();
}

int64_t held(const Matcher &m) {
    int64_t sum = 0;
    for (const auto &u : m.usage()) {
        EXPECT_GE(u.used, 0) << u.path;
        EXPECT_LE(u.used, u.size) << u.path;
        sum += u.used;
    }
    return sum;
}

const char *kTwoNodes =
    R"({"version":1,"resources":[{"type":"node","count":2,"exclusive":true,"with":[{"type":"slot","count":1,
        "label":"t","with":[{"type":"core","count":2}]}]}],
        "tasks":[{"command":["x"],"slot":"t","count":{"per_slot":1}}],"attributes":{"system":{"duration":60}}})";

std::string slot_core(const std::string &count, const std::string &constraints = "") {
    std::string sys = "\"duration\":60";
    if (!constraints.empty()) sys += ",\"constraints\":" + constraints;
    return R"({"version":1,"resources":[{"type":"slot","count":1,"label":"t","with":[{"type":"core","count":)" +
           count + R"(}]}],"tasks":[{"command":["x"],"slot":"t","count":{"per_slot":1}}],"attributes":{"system":{)" +
           sys + "}}}";
}

// R naming one vertex (and, optionally, its size).
std::string r_of(const std::string &path, const std::string &type, int64_t rank, const std::string &size = "1") {
    return R"({"graph":{"nodes":[{"id":"9","metadata":{"type":")" + type + R"(","rank":)" + std::to_string(rank) +
           R"(,"size":)" + size + R"(,"paths":{"containment":")" + path + R"("}}}],"edges":[]}})";
}

}  // namespace

// --- JSON reader -----------------------------------------------------------

TEST(ReaderErrors, NumberPastTheDoubleRangeIsRejected) {
    for (const char *t : {"1e999", "-1e999", "[1, 2e400]", "{\"a\": 123456789e400}"}) {
        std::string why = input_error_of([&] { json::parse(t); });
        EXPECT_NE(why.find("out of the range of a double"), std::string::npos) << t << ": " << why;
    }
    // Large but finite values and integers past int64 still read as doubles.
    EXPECT_DOUBLE_EQ(json::parse("1e308").as_double(), 1e308);
    EXPECT_DOUBLE_EQ(json::parse("123456789012345678901234").as_double(), 123456789012345678901234.0);
    // A value made in code is never written as text that is not JSON.
    EXPECT_EQ(json::dump(json::Value::make_double(std::numeric_limits<double>::infinity())), "null");
    EXPECT_EQ(json::dump(json::Value::make_double(std::numeric_limits<double>::quiet_NaN())), "null");
}

TEST(ReaderErrors, LoneSurrogateEscapesAreRejected) {
    for (const char *t : {R"("\ud800")", R"("a\ud800b")", R"("\udc00")", R"("\ud800\u0041")", R"("\ud800\ud800")",
                          R"(["\ud83d"])"}) {
        std::string why = input_error_of([&] { json::parse(t); });
        EXPECT_NE(why.find("surrogate"), std::string::npos) << t << ": " << why;
    }
    // A proper pair still decodes to one 4-byte character.
    EXPECT_EQ(json::parse(R"("\ud83d\ude00")").as_string(), "\xF0\x9F\x98\x80");
    // Through the JGF reader: the graph is not built.
    std::string jgf = rack_jgf();
    jgf.replace(jgf.find("\"node0\""), 7, "\"node\\ud800\"");
    EXPECT_THROW(Matcher(jgf, MatcherOptions{}), InputError);
}

// --- JGF containment must be a tree under the root --------------------------

TEST(ReaderErrors, EdgeIntoTheRootIsRejected) {
    std::string jgf = rack_jgf();
    jgf.insert(jgf.rfind("]}}"), ",{\"source\":\"1\",\"target\":\"0\"}");
    std::string why = input_error_of([&] { Graph g; g.load_jgf(jgf); });
    EXPECT_NE(why.find("containment root"), std::string::npos) << why;
}

TEST(ReaderErrors, DetachedContainmentCycleIsRejected) {
    std::string jgf = rack_jgf();
    std::string extra =
        R"(,{"id":"50","metadata":{"type":"node","name":"node8","paths":{"containment":"/cluster0/node8"}}},
            {"id":"51","metadata":{"type":"node","name":"node9","paths":{"containment":"/cluster0/node9"}}})";
    jgf.insert(jgf.find("],\"edges\""), extra);
    jgf.insert(jgf.rfind("]}}"), R"(,{"source":"50","target":"51"},{"source":"51","target":"50"})");
    std::string why = input_error_of([&] { Graph g; g.load_jgf(jgf); });
    EXPECT_NE(why.find("containment cycle"), std::string::npos) << why;

    // Attached onto a loaded graph: refused, the graph keeps its vertices.
    Matcher m(rack_jgf(), MatcherOptions{});
    size_t before = m.usage().size();
    std::string sub =
        R"({"graph":{"nodes":[{"id":"50","metadata":{"type":"node","name":"node8","paths":{"containment":"/cluster0/node8"}}},
            {"id":"51","metadata":{"type":"node","name":"node9","paths":{"containment":"/cluster0/node9"}}}],
            "edges":[{"source":"50","target":"51"},{"source":"51","target":"50"}]}})";
    EXPECT_THROW(m.attach(sub), InputError);
    EXPECT_EQ(m.usage().size(), before);
    // A new vertex may not become the parent of one already in the graph.
    std::string adopt =
        R"({"graph":{"nodes":[{"id":"50","metadata":{"type":"rack","name":"rack9","paths":{"containment":"/cluster0/rack9"}}}],
            "edges":[{"source":"0","target":"50"},{"source":"50","target":"0"}]}})";
    EXPECT_THROW(m.attach(adopt), InputError);
    EXPECT_EQ(m.usage().size(), before);
    // The graph is still whole: remove and status changes finish.
    m.set_status("/cluster0/rack0/node0", false);
    m.set_status("/cluster0/rack0/node0", true);
    m.remove("/cluster0/rack0/node1");
    EXPECT_EQ(m.usage().size(), before - 4);
}

// --- jobspec ----------------------------------------------------------------

TEST(ReaderErrors, CountStringPastUint64IsAnInputError) {
    Matcher m(rack_jgf(), MatcherOptions{});
    for (const char *c : {"\"99999999999999999999999\"", "\"18446744073709551616\"", "\"4294967296\""}) {
        std::string why = input_error_of([&] { m.match(slot_core(c), "allocate"); });
        EXPECT_NE(why.find("too large"), std::string::npos) << c << ": " << why;
    }
    EXPECT_EQ(m.next_jobid(), 1);
    EXPECT_EQ(held(m), 0);
    // Leading zeros do not count against the limit.
    EXPECT_EQ(m.match(slot_core("\"0000000000000000000000001\""), "allocate").status, "allocated");
}

TEST(ReaderErrors, HostlistRangePastInt64IsAnInputError) {
    EXPECT_THROW(expand_hostlist("node[0-99999999999999999999]"), InputError);
    EXPECT_THROW(expand_hostlist("node[99999999999999999999]"), InputError);
    // Absurdly long ranges are refused before anything is allocated.
    EXPECT_THROW(expand_hostlist("node[0-999999999999999999]"), InputError);
    EXPECT_THROW(expand_hostlist("a[0-600000],b[0-600000]"), InputError);
    EXPECT_EQ(expand_hostlist("node[000-002]").size(), 3u);
    // Hosts with a number too long to group are written as they are.
    EXPECT_EQ(compress_hostlist({"n123456789012345678901", "n123456789012345678902"}),
              "n123456789012345678901,n123456789012345678902");

    Matcher m(rack_jgf(), MatcherOptions{});
    EXPECT_THROW(m.match(slot_core("1", R"({"hostlist":["node[0-99999999999999999999]"]})"), "allocate"),
                 InputError);
    EXPECT_EQ(m.next_jobid(), 1);
    EXPECT_EQ(held(m), 0);
}

// --- update (R replay) --------------------------------------------------------

TEST(ReaderErrors, UpdateTimesThatOverflowAreInputErrors) {
    Matcher m(rack_jgf(), MatcherOptions{});
    // R of a one-core allocation, as the jgf writer puts it.
    Matcher src(rack_jgf(), MatcherOptions{});
    auto one = src.match(slot_core("1"), "allocate");
    ASSERT_EQ(one.status, "allocated");
    const std::string &R = one.R;
    const int64_t kMax = std::numeric_limits<int64_t>::max();
    EXPECT_THROW(m.update_allocate(5, R, kMax, 10, false), InputError);
    EXPECT_THROW(m.update_allocate(5, R, 5, kMax, false), InputError);
    EXPECT_THROW(m.update_allocate(5, R, kMax, kMax, true), InputError);
    EXPECT_FALSE(m.info(5).has_value());
    EXPECT_EQ(held(m), 0);
    EXPECT_EQ(m.update_allocate(5, R, 0, 3600, false).status, "allocated");
    EXPECT_GT(held(m), 0);
    EXPECT_TRUE(m.cancel(5, false));
    EXPECT_EQ(held(m), 0);
}

TEST(ReaderErrors, UpdateWithNegativeSizeIsAnInputError) {
    Matcher m(rack_jgf(), MatcherOptions{});
    std::string R = r_of("/cluster0/rack0/node0/socket0/core0", "core", 0, "-5");
    std::string why = input_error_of([&] { m.update_allocate(5, R, 0, 10, false); });
    EXPECT_NE(why.find("negative size"), std::string::npos) << why;
    EXPECT_FALSE(m.info(5).has_value());
    EXPECT_EQ(held(m), 0);
}

TEST(ReaderErrors, PartialCancelByROfAncestorsKeepsTheJob) {
    Matcher m(rack_jgf(), MatcherOptions{});
    auto r = m.match(kTwoNodes, "allocate");
    ASSERT_EQ(r.status, "allocated");
    int64_t before = held(m);
    ASSERT_GT(before, 0);
    // node1, rack0 and cluster0 only: cores and sockets under node1 are not
    // named, so nothing is released and the job stays.
    std::string R =
        R"({"graph":{"nodes":[
            {"id":"8","metadata":{"type":"node","rank":1,"paths":{"containment":"/cluster0/rack0/node1"}}},
            {"id":"1","metadata":{"type":"rack","rank":-1,"paths":{"containment":"/cluster0/rack0"}}},
            {"id":"0","metadata":{"type":"cluster","rank":-1,"paths":{"containment":"/cluster0"}}}],
            "edges":[{"source":"1","target":"8"},{"source":"0","target":"1"}]}})";
    EXPECT_FALSE(m.partial_cancel_r(r.jobid, R));
    EXPECT_EQ(held(m), before);
    ASSERT_TRUE(m.info(r.jobid).has_value());
    EXPECT_NE(m.info(r.jobid)->state, "CANCELED");
    EXPECT_TRUE(m.cancel(r.jobid, false));
    EXPECT_EQ(held(m), 0);
}

TEST(ReaderErrors, PartialCancelByRReleasesWholeNamedSubtrees) {
    Matcher m(rack_jgf(), MatcherOptions{});
    auto r = m.match(kTwoNodes, "allocate");
    ASSERT_EQ(r.status, "allocated");
    int64_t before = held(m);
    // Every vertex of node1 named: node1's share goes, node0's stays.
    std::string n1 = "/cluster0/rack0/node1";
    std::string R = R"({"graph":{"nodes":[
        {"id":"8","metadata":{"type":"node","rank":1,"paths":{"containment":")" + n1 + R"("}}},
        {"id":"9","metadata":{"type":"socket","rank":1,"paths":{"containment":")" + n1 + R"(/socket0"}}},
        {"id":"10","metadata":{"type":"core","rank":1,"paths":{"containment":")" + n1 + R"(/socket0/core0"}}},
        {"id":"11","metadata":{"type":"core","rank":1,"paths":{"containment":")" + n1 + R"(/socket0/core1"}}}],
        "edges":[]}})";
    EXPECT_FALSE(m.partial_cancel_r(r.jobid, R));
    int64_t after = held(m);
    EXPECT_GT(after, 0);
    EXPECT_LT(after, before);
    for (const auto &u : m.usage()) {
        if (u.path.rfind(n1, 0) == 0) {
            EXPECT_EQ(u.used, 0) << u.path;
        }
    }
    EXPECT_TRUE(m.cancel(r.jobid, false));
    EXPECT_EQ(held(m), 0);
}
