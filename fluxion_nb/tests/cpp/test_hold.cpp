// Matcher::hold: known amounts of named vertices held as a job, without an R.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "util/errors.hpp"
#include "matcher.hpp"
#include "pool_graph.hpp"

using namespace fluxion;

namespace {

const std::string kCore0 = "/cluster0/node0/core0";
const std::string kMemory0 = "/cluster0/node0/memory0";

Matcher pooled() {
    return Matcher(test_graphs::pool_graph(2, 4, "cluster0"),
                   MatcherOptions{"first", "ALL:core,ALL:node", "simple", {"core", "memory"}});
}

std::map<std::string, int64_t> used(const Matcher &m) {
    std::map<std::string, int64_t> out;
    for (const auto &u : m.usage())
        if (u.used) out[u.path] = u.used;
    return out;
}

}  // namespace

TEST(Hold, TakesExactlyTheNamedUnitsAndCancelReturnsThem) {
    Matcher m = pooled();
    m.hold(1, {{kCore0, 3}, {kMemory0, 2}}, 0, 60);
    EXPECT_EQ(used(m), (std::map<std::string, int64_t>{{kCore0, 3}, {kMemory0, 2}}));
    m.hold(2, {{kCore0, 1}}, 0, 60);  // what is left of the pool stays free to others
    EXPECT_EQ(used(m).at(kCore0), 4);
    EXPECT_TRUE(m.cancel(1, false));
    EXPECT_EQ(used(m), (std::map<std::string, int64_t>{{kCore0, 1}}));
    EXPECT_TRUE(m.cancel(2, false));
    EXPECT_TRUE(used(m).empty());
}

TEST(Hold, RefusesWhatIsNotFreeOrNotThereAndChangesNothing) {
    Matcher m = pooled();
    m.hold(1, {{kCore0, 4}}, 0, 60);
    const auto before = used(m);
    EXPECT_THROW(m.hold(2, {{kMemory0, 1}, {kCore0, 1}}, 0, 60), StateError);
    EXPECT_THROW(m.hold(2, {{"/cluster0/node9/core9", 1}}, 0, 60), NotFoundError);
    EXPECT_THROW(m.hold(2, {{kMemory0, 0}}, 0, 60), InputError);
    EXPECT_THROW(m.hold(2, {{kMemory0, 1}, {kMemory0, 1}}, 0, 60), InputError);
    EXPECT_THROW(m.hold(2, {}, 0, 60), InputError);
    EXPECT_THROW(m.hold(1, {{kMemory0, 1}}, 0, 60), StateError);  // job id in use
    EXPECT_THROW(m.hold(2, {{kMemory0, 1}}, 0, 0), InputError);   // no duration
    EXPECT_EQ(used(m), before);
    m.hold(2, {{kMemory0, 8}}, 0, 60);  // a refused hold left nothing behind
    EXPECT_EQ(used(m).at(kMemory0), 8);
}
