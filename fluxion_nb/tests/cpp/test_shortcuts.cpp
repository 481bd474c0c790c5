// The matcher's shortcuts (deferred bookkeeping below whole nodes, hidden
// leaf-type aggregates) must be invisible: the same random sequence of
// operations on two matchers, one with them and one without, gives the same
// answers at every step.
#include <gtest/gtest.h>

#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "util/errors.hpp"
#include "matcher.hpp"

using namespace fluxion;

namespace {

// cluster -> racks -> nodes -> 2 sockets -> (cores, gpus, one memory pool).
std::string rack_graph(int racks, int nodes_per_rack, int cores, int gpus) {
    std::string nodes, edges;
    int id = 0;
    int rank = 0;
    auto vtx = [&](const std::string &type, int idx, const std::string &path, int64_t size, int r) {
        if (!nodes.empty()) nodes += ",";
        std::string name = type + std::to_string(idx);
        nodes += "{\"id\":\"" + std::to_string(id) + "\",\"metadata\":{\"type\":\"" + type + "\",\"basename\":\"" +
                 type + "\",\"name\":\"" + name + "\",\"id\":" + std::to_string(idx) + ",\"uniq_id\":" +
                 std::to_string(id) + ",\"rank\":" + std::to_string(r) + ",\"exclusive\":false,\"unit\":\"\"," +
                 "\"size\":" + std::to_string(size) + ",\"paths\":{\"containment\":\"" + path + "/" + name + "\"}}}";
        return id++;
    };
    auto edge = [&](int s, int t) {
        if (!edges.empty()) edges += ",";
        edges += "{\"source\":\"" + std::to_string(s) + "\",\"target\":\"" + std::to_string(t) +
                 "\",\"metadata\":{\"name\":{\"containment\":\"contains\"}}}";
    };
    int root = vtx("cluster", 0, "", 1, -1);
    int node_i = 0, sock_i = 0, core_i = 0, gpu_i = 0, mem_i = 0;
    for (int r = 0; r < racks; ++r) {
        std::string rp = "/cluster0/rack" + std::to_string(r);
        int rv = vtx("rack", r, "/cluster0", 1, -1);
        edge(root, rv);
        for (int n = 0; n < nodes_per_rack; ++n, ++rank) {
            std::string np = rp + "/node" + std::to_string(node_i);
            int nv = vtx("node", node_i++, rp, 1, rank);
            edge(rv, nv);
            for (int s = 0; s < 2; ++s) {
                std::string sp = np + "/socket" + std::to_string(sock_i);
                int sv = vtx("socket", sock_i++, np, 1, rank);
                edge(nv, sv);
                for (int c = 0; c < cores; ++c) edge(sv, vtx("core", core_i++, sp, 1, rank));
                for (int g = 0; g < gpus; ++g) edge(sv, vtx("gpu", gpu_i++, sp, 1, rank));
                edge(sv, vtx("memory", mem_i++, sp, 16, rank));
            }
        }
    }
    return "{\"graph\":{\"nodes\":[" + nodes + "],\"edges\":[" + edges + "]}}";
}

std::string spec(const std::string &resources, int duration) {
    return R"({"version":1,"resources":)" + resources +
           R"(,"tasks":[{"command":["x"],"slot":"s","count":{"per_slot":1}}],"attributes":{"system":{"duration":)" +
           std::to_string(duration) + "}}}";
}

const std::vector<std::string> &shapes() {
    static const std::vector<std::string> s = {
        R"([{"type":"node","count":1,"exclusive":true,"with":[{"type":"slot","count":1,"label":"s","with":[{"type":"core","count":1}]}]}])",
        R"([{"type":"node","count":2,"exclusive":true,"with":[{"type":"slot","count":1,"label":"s","with":[{"type":"core","count":1}]}]}])",
        R"([{"type":"slot","count":1,"label":"s","with":[{"type":"core","count":2}]}])",
        R"([{"type":"slot","count":3,"label":"s","with":[{"type":"core","count":2},{"type":"gpu","count":1}]}])",
        R"([{"type":"node","count":1,"with":[{"type":"slot","count":1,"label":"s","with":[{"type":"core","count":3}]}]}])",
        R"([{"type":"slot","count":1,"label":"s","with":[{"type":"node","count":1,"exclusive":true,"with":[{"type":"core","count":1}]}]}])",
        R"([{"type":"slot","count":2,"label":"s","with":[{"type":"core","count":1},{"type":"memory","count":10}]}])",
        R"([{"type":"node","count":1,"with":[{"type":"slot","count":2,"label":"s","with":[{"type":"gpu","count":1}]}]}])",
        R"([{"type":"slot","count":1,"label":"s","with":[{"type":"core","count":1},{"type":"gpu","count":1}]}])",
        R"([{"type":"node","count":1,"with":[{"type":"socket","count":2,"with":[{"type":"slot","count":1,"label":"s","with":[{"type":"gpu","count":1}]}]}]}])",
    };
    return s;
}

std::string describe_all(const Matcher &m, const MatchResult &r) {
    std::string out;
    for (const auto &v : m.describe(r.emitted))
        out += v.path + ":" + std::to_string(v.amount) + (v.exclusive ? "x" : "") + " ";
    return out;
}

std::string usage_of(const Matcher &m) {
    std::string out;
    for (const auto &u : m.usage()) out += u.path + "=" + std::to_string(u.used) + ";";
    return out;
}

// The same options twice: with the shortcuts, and without them.
std::pair<MatcherOptions, MatcherOptions> with_and_without(const std::string &policy,
                                                           const std::string &format = "jgf") {
    MatcherOptions on{policy, "ALL:core,ALL:node", format, {}};
    MatcherOptions off = on;
    off.shortcuts = false;
    return {on, off};
}

void run_twin(const std::string &policy, unsigned seed, int steps, const std::string &format = "jgf") {
    std::string g = rack_graph(2, 4, 4, 1);
    auto [on, off] = with_and_without(policy, format);
    Matcher a(g, on), b(g, off);
    std::mt19937 rng(seed);
    std::vector<int64_t> live;
    const char *ops[] = {"allocate", "allocate_orelse_reserve", "allocate", "satisfiability", "without_allocating"};
    for (int step = 0; step < steps; ++step) {
        SCOPED_TRACE(policy + " seed " + std::to_string(seed) + " step " + std::to_string(step));
        unsigned pick = rng() % 10;
        if (pick < 6) {
            std::string js = spec(shapes()[rng() % shapes().size()], (rng() % 2) ? 60 : 120);
            std::string op = ops[rng() % 5];
            MatchResult ra = a.match(js, op), rb = b.match(js, op);
            ASSERT_EQ(ra.status, rb.status);
            ASSERT_EQ(ra.R, rb.R);
            ASSERT_EQ(ra.at, rb.at);
            ASSERT_EQ(describe_all(a, ra), describe_all(b, rb));
            if (ra.status == "allocated" || ra.status == "reserved") live.push_back(ra.jobid);
        } else if (pick < 8 && !live.empty()) {
            size_t i = rng() % live.size();
            ASSERT_EQ(a.cancel(live[i], false), b.cancel(live[i], false));
            ASSERT_EQ(a.traversal_counts(), b.traversal_counts());
            live.erase(live.begin() + static_cast<long>(i));
        } else if (pick == 8) {
            ASSERT_EQ(usage_of(a), usage_of(b));
            ASSERT_EQ(a.find("sched-now=allocated"), b.find("sched-now=allocated"));
            ASSERT_EQ(a.find("sched-future=reserved"), b.find("sched-future=reserved"));
        } else if (pick == 9 && (rng() % 2) && !live.empty()) {
            // Release one node's part of a job (a reservation refuses).
            size_t i = rng() % live.size();
            unsigned node = rng() % 8;
            std::string path = "/cluster0/rack" + std::to_string(node / 4) + "/node" + std::to_string(node);
            auto partial = [&](Matcher &m) -> std::string {
                try {
                    return m.partial_cancel(live[i], {path}) ? "gone" : "kept";
                } catch (const std::runtime_error &e) {
                    return std::string("error: ") + e.what();
                }
            };
            std::string pa = partial(a), pb = partial(b);
            ASSERT_EQ(pa, pb) << path;
            if (pa == "gone") live.erase(live.begin() + static_cast<long>(i));
            ASSERT_EQ(usage_of(a), usage_of(b));
        } else if (!live.empty()) {
            int64_t j = live[rng() % live.size()];
            ASSERT_EQ(a.find("jobid-tag=" + std::to_string(j)), b.find("jobid-tag=" + std::to_string(j)));
            ASSERT_EQ(a.find("jobid-span=" + std::to_string(j) + " and agfilter=true"),
                      b.find("jobid-span=" + std::to_string(j) + " and agfilter=true"));
        }
    }
    ASSERT_EQ(usage_of(a), usage_of(b));
}

}  // namespace

TEST(Shortcuts, SameAnswersWithoutThem) {
    for (const char *policy : {"first", "firstnodex", "low", "high", "lonode", "hinodex", "variation"})
        for (unsigned seed = 1; seed <= 8; ++seed) run_twin(policy, seed, 200);
}

// pretty_simple indents each vertex by its depth: whole nodes emitted from
// the tree's post-order must carry the depths the walk would give them.
TEST(Shortcuts, SameDepthsWithoutThem) {
    for (const char *policy : {"first", "firstnodex", "lonode"})
        for (unsigned seed = 1; seed <= 4; ++seed) run_twin(policy, seed, 120, "pretty_simple");
}

TEST(Shortcuts, PartialCancelAndReplaySeeTheWholeHold) {
    std::string g = rack_graph(1, 2, 4, 1);
    auto [on, off] = with_and_without("first");
    Matcher a(g, on), b(g, off);
    std::string js = spec(shapes()[0], 60);
    MatchResult ra = a.match(js, "allocate"), rb = b.match(js, "allocate");
    ASSERT_EQ(ra.R, rb.R);
    // Replaying the same R as another job must fail the same way on both.
    EXPECT_THROW(a.update_allocate(99, ra.R, 0, 60, false), StateError);
    EXPECT_THROW(b.update_allocate(99, rb.R, 0, 60, false), StateError);
    EXPECT_EQ(a.partial_cancel(ra.jobid, {"/cluster0/rack0/node0/socket0"}),
              b.partial_cancel(rb.jobid, {"/cluster0/rack0/node0/socket0"}));
    EXPECT_EQ(usage_of(a), usage_of(b));
    EXPECT_EQ(a.cancel(ra.jobid, false), b.cancel(rb.jobid, false));
    EXPECT_EQ(usage_of(a), usage_of(b));
}

namespace {

// Sockets and nodes large enough to keep subtree memos, a handful of
// requests asked again and again (as a scheduler does), and the operations
// that change vertices behind the traverser's back: status, properties,
// replays and holds.
void run_twin_memos(const std::string &policy, unsigned seed, int steps, bool other_shortcuts) {
    std::string g = rack_graph(2, 4, 16, 2);
    MatcherOptions on{policy, "ALL:core,ALL:node", "jgf", {}};
    MatcherOptions off = on;
    off.memos = false;
    off.shortcuts = other_shortcuts;
    Matcher a(g, on), b(g, off);
    std::mt19937 rng(seed);
    std::vector<std::string> requests;
    for (size_t i : {0, 2, 3, 4, 6, 8}) requests.push_back(spec(shapes()[i], 60));
    requests.push_back(R"({"version":1,"resources":)" + shapes()[2] +
                       R"(,"tasks":[{"command":["x"],"slot":"s","count":{"per_slot":1}}],)"
                       R"("attributes":{"system":{"duration":60,"constraints":{"properties":["fast"]}}}})");
    std::vector<std::pair<int64_t, std::string>> live;  // job, R
    int64_t next_id = 100000;
    auto node_path = [&](unsigned n) {
        return "/cluster0/rack" + std::to_string(n / 4) + "/node" + std::to_string(n);
    };
    auto same = [&](const std::function<std::string(Matcher &)> &f) {
        auto run = [&](Matcher &m) -> std::string {
            try {
                return f(m);
            } catch (const std::runtime_error &e) {
                return std::string("error: ") + e.what();
            }
        };
        std::string ra = run(a), rb = run(b);
        EXPECT_EQ(ra, rb);
        return ra;
    };
    for (int step = 0; step < steps; ++step) {
        SCOPED_TRACE(policy + " seed " + std::to_string(seed) + " step " + std::to_string(step));
        unsigned pick = rng() % 16;
        if (pick < 9) {
            const std::string &js = requests[rng() % requests.size()];
            MatchResult ra = a.match(js, pick < 7 ? "allocate" : "allocate_orelse_reserve");
            MatchResult rb = b.match(js, pick < 7 ? "allocate" : "allocate_orelse_reserve");
            ASSERT_EQ(ra.status, rb.status);
            ASSERT_EQ(ra.R, rb.R);
            ASSERT_EQ(ra.at, rb.at);
            // The other shortcuts prune earlier, so only memos alone keep the counts.
            if (other_shortcuts) {
                ASSERT_EQ(a.traversal_counts(), b.traversal_counts());
            }
            if (ra.status == "allocated" || ra.status == "reserved") live.emplace_back(ra.jobid, ra.R);
        } else if (pick < 11 && !live.empty()) {
            size_t i = rng() % live.size();
            auto [job, R] = live[i];
            ASSERT_EQ(a.cancel(job, false), b.cancel(job, false));
            live.erase(live.begin() + static_cast<long>(i));
            if (rng() % 2) {  // replay what it held as a new job
                int64_t id = next_id++;
                if (same([&](Matcher &m) { return m.update_allocate(id, R, 0, 60, false).status; }) == "allocated")
                    live.emplace_back(id, R);
            }
        } else if (pick == 11 && !live.empty()) {
            size_t i = rng() % live.size();
            std::string path = node_path(rng() % 8);
            if (same([&](Matcher &m) { return m.partial_cancel(live[i].first, {path}) ? "gone" : "kept"; }) ==
                "gone")
                live.erase(live.begin() + static_cast<long>(i));
        } else if (pick == 12) {
            std::string path = node_path(rng() % 8);
            bool up = rng() % 3 != 0;
            same([&](Matcher &m) {
                m.set_status(path, up);
                return std::string("ok");
            });
        } else if (pick == 13) {
            std::string path = node_path(rng() % 8);
            std::string value = (rng() % 2) ? "1" : "0";
            same([&](Matcher &m) {
                m.set_property(path, "fast", value);
                return std::string("ok");
            });
        } else if (pick == 14) {
            unsigned n = rng() % 8;
            std::string core = node_path(n) + "/socket" + std::to_string(2 * n) + "/core" +
                               std::to_string(32 * n + rng() % 16);
            int64_t id = next_id++;
            if (same([&](Matcher &m) {
                    m.hold(id, {{core, 1}}, 0, 60);
                    return std::string("held");
                }) == "held")
                live.emplace_back(id, "");
        } else {
            ASSERT_EQ(usage_of(a), usage_of(b));
        }
    }
    ASSERT_EQ(usage_of(a), usage_of(b));
    // The memos must have answered some walks, or this test proves nothing.
    EXPECT_GT(a.memo_hits(), 0u);
    EXPECT_EQ(b.memo_hits(), 0u);
}

}  // namespace

TEST(Shortcuts, SubtreeMemosGiveTheSameAnswers) {
    for (const char *policy : {"low", "high", "lonode", "hinode", "locality", "variation"})
        for (unsigned seed = 1; seed <= 6; ++seed) {
            run_twin_memos(policy, seed, 300, true);
            run_twin_memos(policy, seed + 100, 300, false);
        }
}

namespace {

// A rack of 300 nodes: wider than the update walk's fan-out threshold, so the
// walk with the shortcuts visits only the listed children of the rack.
void run_twin_wide(const std::string &policy, unsigned seed, int steps) {
    const int nodes = 300;
    std::string g = rack_graph(1, nodes, 2, 1);
    auto [on, off] = with_and_without(policy);
    Matcher a(g, on), b(g, off);
    std::mt19937 rng(seed);
    std::vector<int64_t> live;
    int64_t next_id = 100000;
    auto node_path = [](unsigned n) { return "/cluster0/rack0/node" + std::to_string(n); };
    for (int step = 0; step < steps; ++step) {
        SCOPED_TRACE(policy + " seed " + std::to_string(seed) + " step " + std::to_string(step));
        unsigned pick = rng() % 8;
        if (pick < 4) {
            std::string js = spec(shapes()[rng() % shapes().size()], 60);
            std::string op = pick == 3 ? "allocate_orelse_reserve" : "allocate";
            MatchResult ra = a.match(js, op), rb = b.match(js, op);
            ASSERT_EQ(ra.status, rb.status);
            ASSERT_EQ(ra.R, rb.R);
            ASSERT_EQ(describe_all(a, ra), describe_all(b, rb));
            if (ra.status == "allocated" || ra.status == "reserved") live.push_back(ra.jobid);
        } else if (pick == 4) {
            // Hold cores on a few nodes spread over the rack, as one job.
            std::vector<std::pair<std::string, int64_t>> cores;
            for (int k = 0, n = static_cast<int>(rng() % 4) + 1; k < n; ++k) {
                unsigned node = rng() % nodes;
                cores.emplace_back(node_path(node) + "/socket" + std::to_string(2 * node) + "/core" +
                                       std::to_string(4 * node + rng() % 2),
                                   1);
            }
            int64_t id = next_id++;
            auto hold = [&](Matcher &m) -> std::string {
                try {
                    m.hold(id, cores, 0, 60);
                    return "held";
                } catch (const std::runtime_error &e) {
                    return std::string("error: ") + e.what();
                }
            };
            std::string ha = hold(a), hb = hold(b);
            ASSERT_EQ(ha, hb);
            if (ha == "held") live.push_back(id);
        } else if (pick < 7 && !live.empty()) {
            size_t i = rng() % live.size();
            ASSERT_EQ(a.cancel(live[i], false), b.cancel(live[i], false));
            ASSERT_EQ(a.traversal_counts(), b.traversal_counts());
            live.erase(live.begin() + static_cast<long>(i));
        } else {
            ASSERT_EQ(usage_of(a), usage_of(b));
        }
    }
    ASSERT_EQ(usage_of(a), usage_of(b));
}

}  // namespace

TEST(Shortcuts, WideVerticesSameAnswers) {
    for (const char *policy : {"first", "low", "high", "lonode"})
        for (unsigned seed = 1; seed <= 3; ++seed) run_twin_wide(policy, seed, 150);
}
