// Graph loading: the arena JSON reader, the string index, lazy containers and
// planners, and JGF validation leaving the graph untouched.
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "util/errors.hpp"
#include "graph/graph.hpp"
#include "util/json.hpp"
#include "util/lazy.hpp"
#include "matcher.hpp"
#include "planner/planner.hpp"
#include "util/str_index.hpp"

using namespace fluxion;

namespace {

std::string error_of(const std::function<void()> &f) {
    try {
        f();
    } catch (const InputError &e) {
        return e.what();
    }
    return "";
}

// cluster0 -> node0..node{n-1} -> core0..core1 each; ids are decimal strings.
std::string small_jgf(int n) {
    std::string nodes, edges;
    int id = 0;
    auto vtx = [&](const std::string &type, const std::string &name, const std::string &path) {
        if (!nodes.empty()) nodes += ",";
        nodes += "{\"id\":\"" + std::to_string(id) + "\",\"metadata\":{\"type\":\"" + type +
                 "\",\"name\":\"" + name + "\",\"paths\":{\"containment\":\"" + path + "\"}}}";
        return id++;
    };
    auto edge = [&](int s, int t) {
        if (!edges.empty()) edges += ",";
        edges += "{\"source\":\"" + std::to_string(s) + "\",\"target\":\"" + std::to_string(t) + "\"}";
    };
    int root = vtx("cluster", "cluster0", "/cluster0");
    for (int i = 0; i < n; ++i) {
        std::string np = "/cluster0/node" + std::to_string(i);
        int nv = vtx("node", "node" + std::to_string(i), np);
        edge(root, nv);
        for (int c = 0; c < 2; ++c) edge(nv, vtx("core", "core" + std::to_string(c), np + "/core" + std::to_string(c)));
    }
    return "{\"graph\":{\"nodes\":[" + nodes + "],\"edges\":[" + edges + "]}}";
}

}  // namespace

TEST(JsonDocument, MatchesValueParse) {
    const char *text = R"({"a": [1, -2, 2.5, 1e3, "x\n\u00e9\ud83d\ude00", true, false, null], "b": {"c": {}, "d": []},
                          "big": 123456789012345678901234, "a": "dup"})";
    json::Document d = json::parse_document(text);
    EXPECT_EQ(json::dump(json::to_value(d.root())), json::dump(json::parse(text)));
    const json::Node *a = d.root().find("a");
    ASSERT_TRUE(a && a->is_array());  // the first of duplicate keys
    EXPECT_EQ(a->size(), 8u);
    EXPECT_EQ(a->begin_items()[4].str(), "x\n\xc3\xa9\xf0\x9f\x98\x80");
    EXPECT_EQ(d.root().find("big")->kind, json::Kind::Double);
    EXPECT_EQ(d.root().find("missing"), nullptr);
}

TEST(JsonDocument, SyntaxErrorsNameTheByte) {
    EXPECT_EQ(error_of([] { json::parse_document("{\"a\": [1, 2"); }), "invalid JSON at byte 11: expected ']'");
    EXPECT_EQ(error_of([] { json::parse_document("{\"a\": \"x\\q\"}"); }),
              "invalid JSON at byte 10: bad escape in string");
    EXPECT_EQ(error_of([] { json::parse_document("[1] 2"); }),
              "invalid JSON at byte 4: trailing characters after the JSON value");
    EXPECT_EQ(error_of([] { json::parse_document("{\"a\": -}"); }), "invalid JSON at byte 7: unexpected character");
    EXPECT_EQ(error_of([] { json::parse_document("\"abc"); }), "invalid JSON at byte 4: unterminated string");
    std::string deep(600, '[');
    EXPECT_NE(error_of([&] { json::parse_document(deep); }).find("nesting too deep"), std::string::npos);
}

TEST(JsonDocument, StreamsTheNamedArrayElementByElement) {
    const char *text = R"({"x": {"items": [9]}, "g": {"items": [{"a": [1, 2], "s": "p\"q"}, 3, "s"], "items": [7]},
                          "g": {"items": [8]}})";
    std::vector<std::string> seen, next;
    json::Document d = json::parse_document(text, {"g", "items"}, [&](const json::Node &n, const json::Node *after) {
        seen.push_back(json::dump(json::to_value(n)));
        next.push_back(after ? json::dump(json::to_value(*after)) : "none");
    });
    // Only the first "g" and its first "items" stream; the array stays empty.
    ASSERT_EQ(seen.size(), 3u);
    EXPECT_EQ(seen[0], R"({"a": [1, 2], "s": "p\"q"})");
    EXPECT_EQ(seen[1], "3");
    EXPECT_EQ(seen[2], "\"s\"");
    // Each element comes with the one after it, whole.
    EXPECT_EQ(next[0], "3");
    EXPECT_EQ(next[1], "\"s\"");
    EXPECT_EQ(next[2], "none");
    EXPECT_EQ(d.root().find("g")->find("items")->size(), 0u);
    EXPECT_EQ(json::dump(json::to_value(*d.root().find("x"))), R"({"items": [9]})");
    // Two arenas take turns: an element and the next stay whole while both
    // are handed over, over more elements than there are arenas.
    std::string pairs;
    json::parse_document(R"({"g": {"items": [{"a": [1]}, {"b": [2, {"c": 3}]}, {"d": []}, {"e": [4]}]}})",
                         {"g", "items"}, [&](const json::Node &n, const json::Node *after) {
                             pairs += json::dump(json::to_value(n)) + " > " +
                                      (after ? json::dump(json::to_value(*after)) : "none") + "; ";
                         });
    EXPECT_EQ(pairs, R"({"a": [1]} > {"b": [2, {"c": 3}]}; {"b": [2, {"c": 3}]} > {"d": []}; )"
                     R"({"d": []} > {"e": [4]}; {"e": [4]} > none; )");
    // Elements followed by a complete element before a syntax error are
    // still reported; the error wins.
    std::vector<int64_t> got;
    EXPECT_EQ(error_of([&] { json::parse_document(R"({"g": {"items": [1, 2, }})", {"g", "items"},
                                                  [&](const json::Node &n, const json::Node *) { got.push_back(n.as_int()); }); }),
              "invalid JSON at byte 23: unexpected character");
    EXPECT_EQ(got, std::vector<int64_t>{1});
}

TEST(StrIndex, InsertFindEraseAcrossGrowth) {
    std::vector<std::string> keys;
    for (int i = 0; i < 5000; ++i) keys.push_back("k" + std::to_string(i * 7919 % 100003));
    auto key_of = [&keys](int i) { return std::string_view(keys[static_cast<size_t>(i)]); };
    StrIndex<decltype(key_of)> idx(key_of);
    for (int i = 0; i < 5000; ++i) ASSERT_EQ(idx.insert(keys[static_cast<size_t>(i)], i), i);
    EXPECT_EQ(idx.insert(keys[42], 7), 42);  // present: the old id stays
    EXPECT_EQ(idx.size(), 5000u);
    for (int i = 0; i < 5000; i += 2) idx.erase(keys[static_cast<size_t>(i)]);
    for (int i = 0; i < 5000; ++i) EXPECT_EQ(idx.find(keys[static_cast<size_t>(i)]), i % 2 ? i : -1) << i;
    EXPECT_EQ(idx.find("absent"), -1);
    idx.assign(keys[1], 1);
    EXPECT_EQ(idx.find(keys[1]), 1);
    EXPECT_EQ(idx.size(), 2500u);
}

TEST(Lazy, BehavesAsAnEmptyContainerUntilUsed) {
    Lazy<std::map<int64_t, int64_t>> m;
    EXPECT_TRUE(m.empty());
    EXPECT_EQ(m.find(3), m.end());
    EXPECT_EQ(m.count(3), 0u);
    EXPECT_EQ(m.erase(3), 0u);
    m[3] = 4;
    auto it = m.find(3);
    ASSERT_NE(it, m.end());
    EXPECT_EQ(it->second, 4);
    m.erase(it);
    EXPECT_TRUE(m.empty());
    Lazy<std::set<int64_t>> s;
    s.insert(5);
    Lazy<std::set<int64_t>> copy = s;
    EXPECT_EQ(copy.count(5), 1u);
}

TEST(Planner, UntouchedPlannerAnswersFromItsTotal) {
    Planner p(0, 100, 3);
    EXPECT_EQ(p.avail_at(0), 3);
    EXPECT_EQ(p.avail_during(10, 90), 3);
    EXPECT_EQ(p.avail_during(10, 91), -1);
    EXPECT_EQ(p.span_count(), 0u);
    EXPECT_FALSE(p.rem_span(0));
    EXPECT_EQ(p.avail_time_next(), -1);
    EXPECT_EQ(p.avail_time_first(5, 10, 3), -1);  // only scheduled points are candidates
    EXPECT_EQ(p.avail_time_first(0, 10, 3), 0);
    Planner q = p;
    EXPECT_GE(q.add_span(0, 10, 2), 0);
    EXPECT_EQ(q.avail_at(0), 1);
    EXPECT_EQ(p.avail_at(0), 3);  // copies do not share state
    p.set_total(5);
    EXPECT_EQ(p.avail_at(50), 5);
    int64_t s = q.add_span(20, 10, 3);
    q.reset();
    EXPECT_EQ(q.avail_at(0), 3);
    EXPECT_GT(q.add_span(0, 10, 1), s);  // ids are not reused after a reset
}

TEST(GraphLoad, IndexesEveryVertexByPath) {
    Graph g;
    g.load_jgf(small_jgf(50));
    EXPECT_EQ(g.vertices.size(), 151u);
    EXPECT_EQ(g.edges.size(), 150u);
    EXPECT_EQ(g.nodes_up, 50);
    int v = g.find_path("/cluster0/node17/core1");
    ASSERT_GE(v, 0);
    EXPECT_EQ(g.vertices[static_cast<size_t>(v)].name, "core1");
    EXPECT_EQ(g.vertices[static_cast<size_t>(v)].basename, "core");
    EXPECT_EQ(g.find_path("/cluster0/node50"), -1);
    EXPECT_EQ(g.vertices[static_cast<size_t>(g.root)].path, "/cluster0");
}

TEST(GraphLoad, BadJgfLeavesTheGraphAsItWas) {
    Graph g;
    g.load_jgf(small_jgf(2));
    size_t before = g.vertices.size();
    // A subgraph whose second vertex repeats a path: refused, nothing added.
    std::string bad =
        R"({"graph":{"nodes":[{"id":"100","metadata":{"type":"node","name":"node9","paths":{"containment":"/cluster0/node9"}}},
                              {"id":"101","metadata":{"type":"core","name":"core0","paths":{"containment":"/cluster0/node9"}}}],
                     "edges":[{"source":"0","target":"100"}]}})";
    EXPECT_EQ(error_of([&] { g.attach_jgf(bad); }), "JGF node '101': duplicate containment path /cluster0/node9");
    EXPECT_EQ(g.vertices.size(), before);
    EXPECT_EQ(g.find_path("/cluster0/node9"), -1);
    // The same subgraph without the bad vertex attaches.
    std::string good =
        R"({"graph":{"nodes":[{"id":"100","metadata":{"type":"node","name":"node9","paths":{"containment":"/cluster0/node9"}}}],
                     "edges":[{"source":"0","target":"100"}]}})";
    EXPECT_EQ(g.attach_jgf(good).size(), 1u);
    EXPECT_GE(g.find_path("/cluster0/node9"), 0);
    EXPECT_EQ(g.nodes_up, 3);
    // Removing a subtree drops its paths and ids; they can come back.
    g.detach_subtree(g.find_path("/cluster0/node9"));
    EXPECT_EQ(g.find_path("/cluster0/node9"), -1);
    EXPECT_EQ(g.attach_jgf(good).size(), 1u);
    EXPECT_GE(g.find_path("/cluster0/node9"), 0);
}

TEST(GraphLoad, IdsOfEveryFormFindTheirVertex) {
    // Small decimal ids take the array, the rest the hash index: "7" and
    // "07" are different vertices, and so are ids past nine digits.
    Graph g;
    g.load_jgf(R"({"graph":{"nodes":[
        {"id":"0","metadata":{"type":"cluster","paths":{"containment":"/c"}}},
        {"id":"07","metadata":{"type":"node","paths":{"containment":"/c/a"}}},
        {"id":"7","metadata":{"type":"node","paths":{"containment":"/c/b"}}},
        {"id":9,"metadata":{"type":"node","paths":{"containment":"/c/d"}}},
        {"id":"x","metadata":{"type":"core","uniq_id":20,"paths":{"containment":"/c/a/x"}}},
        {"id":"12345678901","metadata":{"type":"core","paths":{"containment":"/c/b/big"}}},
        {"id":"5","metadata":{"type":"core","paths":{"containment":"/c/d/five"}}}],
      "edges":[{"source":"0","target":"07"},{"source":"0","target":"7"},{"source":"0","target":9},
               {"source":"07","target":"x"},{"source":"7","target":"12345678901"},{"source":"9","target":"5"}]}})");
    auto parent_path = [&](const char *path) {
        int v = g.find_path(path);
        for (const Edge &e : g.edges)
            if (e.target == v) return std::string(g.vertices[static_cast<size_t>(e.source)].path);
        return std::string("none");
    };
    EXPECT_EQ(parent_path("/c/a"), "/c");
    EXPECT_EQ(parent_path("/c/a/x"), "/c/a");
    EXPECT_EQ(parent_path("/c/b/big"), "/c/b");
    EXPECT_EQ(parent_path("/c/d/five"), "/c/d");
    EXPECT_EQ(g.edges.size(), 6u);
    auto load = [](const std::string &t) { return error_of([&] { Graph h; h.load_jgf(t); }); };
    // A numbered id no vertex has is unknown even when a zero-padded one exists.
    EXPECT_EQ(load(R"({"graph":{"nodes":[{"id":"0","metadata":{"type":"x","paths":{"containment":"/x"}}},
                                         {"id":"01","metadata":{"type":"x","paths":{"containment":"/x/y"}}}],
                                "edges":[{"source":"0","target":"1"}]}})"),
              "JGF edge 0: unknown target vertex '1'");
}

TEST(GraphLoad, ErrorsNameTheElement) {
    auto load = [](const std::string &t) { return error_of([&] { Graph g; g.load_jgf(t); }); };
    EXPECT_EQ(load("[]"), "JGF: the document must be an object");
    EXPECT_EQ(load(R"({"graph":{"nodes":[]}})"), "JGF graph: required key 'edges' is missing");
    EXPECT_EQ(load(R"({"graph":{"nodes":[{"id":true}],"edges":[]}})"), "JGF node 0: 'id' must be a string");
    EXPECT_EQ(load(R"({"graph":{"nodes":[{"id":7,"metadata":{"type":"x"}}],"edges":[]}})"),
              "JGF node '7' metadata: required key 'paths' is missing");
    EXPECT_EQ(load(R"({"graph":{"nodes":[{"id":"5","metadata":{"type":"x","size":1.5,"paths":{}}}],"edges":[]}})"),
              "JGF node '5': metadata.size must be an integer");
    EXPECT_EQ(load(R"({"graph":{"nodes":[{"id":"1","metadata":{"type":"x","paths":{"containment":"/x"}}},
                                         {"id":"1","metadata":{"type":"x","paths":{"containment":"/y"}}}],"edges":[]}})"),
              "JGF node '1': duplicate vertex id");
    EXPECT_EQ(load(R"({"graph":{"nodes":[{"id":"1","metadata":{"type":"x","paths":{"containment":"/x"}}}],
                                "edges":[{"source":"1","target":"2"}]}})"),
              "JGF edge 0: unknown target vertex '2'");
    EXPECT_EQ(load(R"({"graph":{"nodes":[{"id":"1","metadata":{"type":"x","paths":{"containment":"/x"}}},
                                         {"id":"2","metadata":{"type":"x","paths":{"containment":"/x/y"}}}],"edges":[]}})"),
              "JGF node '2': no containment edge reaches it (path /x/y)");
    // A syntax error anywhere wins over a semantic one earlier in the text.
    EXPECT_EQ(load(R"({"graph":{"nodes":[{"id":true}],"edges":[}})"), "invalid JSON at byte 41: unexpected character");
}

TEST(GraphLoad, MatcherOnLoadedGraphAllocatesWholeNodes) {
    Matcher m(small_jgf(4), MatcherOptions{"first", "ALL:core,ALL:node", "simple", {}});
    const char *node1 =
        R"({"version":1,"resources":[{"type":"node","count":1,"exclusive":true,"with":[{"type":"slot","count":1,"label":"t",
            "with":[{"type":"core","count":1}]}]}],"tasks":[{"command":["x"],"slot":"t","count":{"per_slot":1}}],
            "attributes":{"system":{"duration":60}}})";
    for (int i = 0; i < 4; ++i) ASSERT_EQ(m.match(node1, "allocate").status, "allocated") << i;
    EXPECT_EQ(m.match(node1, "allocate").status, "busy");
    EXPECT_TRUE(m.cancel(2, false));
    auto r = m.match(node1, "allocate");
    ASSERT_EQ(r.status, "allocated");
    EXPECT_NE(r.R.find("node"), std::string::npos) << r.R;
}
