// The flexible traverser: or-slots (sibling slots, packed to fit as many as
// possible) and xor_slot alternatives (exactly one used, tried in jobspec
// order), and the reader rules that go with them.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "util/errors.hpp"
#include "traverser/flexible.hpp"
#include "graph/graph.hpp"
#include "matcher.hpp"
#include "pool_graph.hpp"

using namespace fluxion;

namespace {
using test_graphs::pool_graph;

constexpr int kCore = 1, kGpu = 3;

Resource res(int type, unsigned count, std::vector<Resource> with = {}, const std::string &label = "") {
    Resource r;
    r.type = type;
    r.count.min = r.count.max = count;
    r.with = std::move(with);
    r.label = label;
    return r;
}

// Fixed counts: a shape takes its count when that many are left, else nothing.
unsigned fixed_count(const Resource &r, unsigned available) {
    return r.count.min <= available ? r.count.min : 0;
}

std::string jobspec(const std::string &resources) {
    return R"({"version":1,"resources":)" + resources +
           R"(,"tasks":[{"command":["x"],"slot":"s","count":{"per_slot":1}}],"attributes":{"system":{"duration":60}}})";
}

MatcherOptions opts(const std::string &traverser, std::set<std::string> pools = {}) {
    return MatcherOptions{"first", "ALL:core,ALL:node", "jgf", std::move(pools), traverser};
}

bool holds(const Matcher &m, const MatchResult &r, const std::string &type) {
    for (const auto &v : m.describe(r.emitted))
        if (v.type == type) return true;
    return false;
}
}  // namespace

// --- splitting xor_slot alternatives into variants ---------------------------

TEST(SplitXorSlots, OneVariantPerAlternativeInJobspecOrder) {
    TypeTable t;
    auto socket_of = [&](const std::vector<std::string> &labels) {
        std::vector<Resource> xs;
        for (const auto &l : labels) xs.push_back(res(t.xor_slot, 1, {res(t.core, 1)}, l));
        return res(t.socket, 1, xs);
    };
    std::vector<Resource> top = {res(t.xor_slot, 1, {socket_of({"a1", "a2"})}, "a"),
                                 res(t.xor_slot, 1, {res(t.node, 1, {socket_of({"b1", "b2", "b3"})})}, "b")};
    auto variants = split_xor_slots(top, t.slot, t.xor_slot);
    ASSERT_EQ(variants.size(), 5u);
    std::vector<std::string> inner;
    for (const auto &v : variants) {
        ASSERT_EQ(v.size(), 1u);
        EXPECT_EQ(v[0].type, t.slot);
        EXPECT_FALSE(contains_xor_slot(v, t.xor_slot));
        const Resource *socket = v[0].label == "a" ? &v[0].with[0] : &v[0].with[0].with[0];
        ASSERT_EQ(socket->with.size(), 1u);
        EXPECT_EQ(socket->with[0].type, t.slot);
        inner.push_back(socket->with[0].label);
    }
    EXPECT_EQ(inner, (std::vector<std::string>{"a1", "a2", "b1", "b2", "b3"}));
}

TEST(SplitXorSlots, RequiredSiblingsAreKeptAndOneAlternativeAppended) {
    TypeTable t;
    std::vector<Resource> level = {res(t.xor_slot, 1, {res(t.core, 2)}, "x"), res(t.node, 1),
                                   res(t.xor_slot, 1, {res(t.gpu, 1)}, "y")};
    auto variants = split_xor_slots(level, t.slot, t.xor_slot);
    ASSERT_EQ(variants.size(), 2u);
    for (const auto &v : variants) {
        ASSERT_EQ(v.size(), 2u);
        EXPECT_EQ(v[0].type, t.node);
        EXPECT_EQ(v[1].type, t.slot);
    }
    EXPECT_EQ(variants[0][1].label, "x");
    EXPECT_EQ(variants[1][1].label, "y");
    // Without alternatives the request is its own single variant.
    EXPECT_EQ(split_xor_slots({res(t.node, 1)}, t.slot, t.xor_slot).size(), 1u);
}

TEST(SplitXorSlots, TooManyVariantsGiveNone) {
    TypeTable t;
    std::vector<Resource> level;
    for (int i = 0; i < 11; ++i) level.push_back(res(t.xor_slot, 1, {res(t.core, 1)}));
    EXPECT_EQ(split_xor_slots(level, t.slot, t.xor_slot, 10).size(), 0u);
    EXPECT_EQ(split_xor_slots(level, t.slot, t.xor_slot, 11).size(), 11u);
}

// --- planning which or-slots to cut ------------------------------------------

TEST(OrSlotPlanner, SingleShapeIsCappedByTheSlotCount) {
    std::vector<Resource> slots = {res(0, 2, {res(kCore, 4)})};
    std::vector<int> order;
    OrSlotPlanner(slots, 2, fixed_count).plan({{kCore, 18}}, order);
    EXPECT_EQ(order, (std::vector<int>{0, 0}));
    OrSlotPlanner(slots, 9, fixed_count).plan({{kCore, 18}}, order);
    EXPECT_EQ(order.size(), 4u);
    OrSlotPlanner(slots, 9, fixed_count).plan({{kCore, 3}}, order);
    EXPECT_TRUE(order.empty());
}

TEST(OrSlotPlanner, SeveralShapesPackTheMostSlotsFirstListedOnATie) {
    // 18 cores and one gpu: small (8 cores + the gpu) then big (10 cores)
    // makes two slots; big first would also make two, but small is listed first.
    std::vector<Resource> slots = {res(0, 1, {res(kCore, 8), res(kGpu, 1)}, "small"),
                                   res(0, 1, {res(kCore, 10)}, "big")};
    std::vector<int> order;
    ASSERT_TRUE(OrSlotPlanner(slots, 1, fixed_count).plan({{kCore, 18}, {kGpu, 1}}, order));
    EXPECT_EQ(order, (std::vector<int>{0, 1}));
    // Without the gpu only big fits, once.
    ASSERT_TRUE(OrSlotPlanner(slots, 1, fixed_count).plan({{kCore, 18}, {kGpu, 0}}, order));
    EXPECT_EQ(order, (std::vector<int>{1}));
    // Packing beats greed: 12 cores fit small-ish twice rather than big once.
    std::vector<Resource> two = {res(0, 1, {res(kCore, 7)}), res(0, 1, {res(kCore, 6)})};
    ASSERT_TRUE(OrSlotPlanner(two, 1, fixed_count).plan({{kCore, 12}}, order));
    EXPECT_EQ(order, (std::vector<int>{1, 1}));
}

TEST(OrSlotPlanner, DeepPackingNeedsNoDeepRecursionAndIsBounded) {
    std::vector<Resource> slots = {res(0, 1, {res(kCore, 1)}), res(0, 1, {res(kCore, 1)})};
    std::vector<int> order;
    ASSERT_TRUE(OrSlotPlanner(slots, 1, fixed_count).plan({{kCore, 50000}}, order));
    EXPECT_EQ(order.size(), 50000u);
    EXPECT_FALSE(OrSlotPlanner(slots, 1, fixed_count, 1000).plan({{kCore, 50000}}, order));
    EXPECT_TRUE(order.empty());
}

// --- reading jobspecs --------------------------------------------------------

TEST(FlexibleJobspec, SimpleTraverserRefusesXorSlots) {
    TypeTable t;
    const std::string js = jobspec(R"([{"type":"xor_slot","count":1,"label":"s","with":[{"type":"core","count":1}]}])");
    try {
        parse_jobspec_text(js, t);
        ADD_FAILURE() << "expected InputError";
    } catch (const InputError &e) {
        EXPECT_NE(std::string(e.what()).find("needs the flexible traverser"), std::string::npos) << e.what();
    }
    EXPECT_EQ(parse_jobspec_text(js, t, TraverserKind::Flexible).resources.size(), 1u);
}

TEST(FlexibleJobspec, SlotsBesideResourcesAreRefused) {
    TypeTable t;
    const std::string js = jobspec(R"([{"type":"socket","count":1,"with":[{"type":"core","count":1}]},)"
                                   R"({"type":"slot","count":1,"label":"s","with":[{"type":"core","count":2}]}])");
    try {
        parse_jobspec_text(js, t, TraverserKind::Flexible);
        ADD_FAILURE() << "expected InputError";
    } catch (const InputError &e) {
        EXPECT_NE(std::string(e.what()).find("'socket' beside slots"), std::string::npos) << e.what();
    }
}

TEST(FlexibleJobspec, EmptyAlternativesAndHugeExpansionsAreRefused) {
    TypeTable t;
    EXPECT_THROW(parse_jobspec_text(jobspec(R"([{"type":"xor_slot","count":1,"label":"s"},)"
                                            R"({"type":"xor_slot","count":1,"label":"t","with":[{"type":"core","count":1}]}])"),
                                    t, TraverserKind::Flexible),
                 InputError);
    // Four nested levels of ten alternatives each: 10^4 variants.
    std::string level = R"({"type":"core","count":1})";
    for (int depth = 0; depth < 4; ++depth) {
        std::string alts;
        for (int i = 0; i < 10; ++i)
            alts += std::string(i ? "," : "") + R"({"type":"xor_slot","count":1,"with":[)" + level + "]}";
        level = R"({"type":"socket","count":1,"with":[)" + alts + "]}";
    }
    try {
        parse_jobspec_text(jobspec("[" + level + "]"), t, TraverserKind::Flexible);
        ADD_FAILURE() << "expected InputError";
    } catch (const InputError &e) {
        EXPECT_NE(std::string(e.what()).find("more than 1000 variants"), std::string::npos) << e.what();
    }
}

// --- matching ----------------------------------------------------------------

TEST(FlexibleMatch, OrSlotsAreCutSideBySide) {
    // Two slots, each of all the cores or all the memory of a node: one node
    // (4 cores, 8 memory) yields one of each.
    const std::string js = jobspec(R"([{"type":"slot","count":2,"label":"c","with":[{"type":"core","count":4}]},)"
                                   R"({"type":"slot","count":2,"label":"m","with":[{"type":"memory","count":8}]}])");
    EXPECT_THROW(Matcher(pool_graph(2, 4), opts("simple")).match(js, "allocate"), InputError);
    Matcher m(pool_graph(2, 4), opts("flexible"));
    EXPECT_EQ(m.traverser(), "flexible");
    for (int job = 0; job < 2; ++job) {
        MatchResult r = m.match(js, "allocate");
        ASSERT_EQ(r.status, "allocated") << r.error;
        EXPECT_TRUE(holds(m, r, "core"));
        EXPECT_TRUE(holds(m, r, "memory"));
    }
    EXPECT_EQ(m.match(js, "allocate").status, "busy");
}

TEST(FlexibleMatch, FirstAlternativeThatFitsWins) {
    const std::string js =
        jobspec(R"([{"type":"xor_slot","count":1,"label":"a","with":[{"type":"core","count":4},{"type":"memory","count":8}]},)"
                R"({"type":"xor_slot","count":1,"label":"b","with":[{"type":"core","count":1}]}])");
    const std::string gpu_first =
        jobspec(R"([{"type":"xor_slot","count":1,"label":"a","with":[{"type":"core","count":1},{"type":"gpu","count":1}]},)"
                R"({"type":"xor_slot","count":1,"label":"b","with":[{"type":"core","count":1}]}])");
    Matcher m(pool_graph(2, 4), opts("flexible"));
    MatchResult r = m.match(js, "allocate");
    ASSERT_EQ(r.status, "allocated") << r.error;
    EXPECT_TRUE(holds(m, r, "memory"));
    // No gpu anywhere: the second alternative is used.
    r = m.match(gpu_first, "allocate");
    ASSERT_EQ(r.status, "allocated") << r.error;
    EXPECT_TRUE(holds(m, r, "core"));
    EXPECT_FALSE(holds(m, r, "memory"));
    EXPECT_EQ(m.match(gpu_first, "allocate").status, "busy");
    EXPECT_EQ(m.match(gpu_first, "satisfiability").status, "satisfiable");
}

TEST(FlexibleMatch, OptionsAreChecked) {
    EXPECT_THROW(Matcher(pool_graph(1, 4), opts("sideways")), InputError);
    EXPECT_THROW(Matcher(pool_graph(1, 4), opts("flexible", {"core"})), InputError);
}
