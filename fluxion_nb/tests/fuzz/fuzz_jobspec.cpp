// libFuzzer target: the jobspec reader and the matcher behind it.
//
// The input (JSON jobspec text) is matched against the small fixed graph
// with each match operation, under the default policy and with partial
// pools. A rejected jobspec must be an InputError and change nothing; an
// accepted one gives a result, and once every job is cancelled the graph
// is empty and the whole-graph job fits again.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_common.hpp"

using namespace fluxion;

namespace {
const char *kOps[] = {"allocate", "allocate_orelse_reserve", "allocate_with_satisfiability",
                      "satisfiability", "without_allocating", "without_allocating_future"};

void run(const std::string &text, MatcherOptions opts, bool all_ops) {
    Matcher m(fuzz::small_graph(), std::move(opts));
    std::vector<int64_t> live;
    for (const char *op : kOps) {
        auto before = fuzz::Snapshot::of(m);
        try {
            auto r = m.match(text, op);
            if (r.status == "allocated" || r.status == "reserved") live.push_back(r.jobid);
            else if (fuzz::Snapshot::of(m).jobs != before.jobs) fuzz::fail("a job appeared without allocation", op);
        } catch (const InputError &) {
            if (fuzz::Snapshot::of(m) != before) fuzz::fail("rejected jobspec changed state", op);
            return;  // the reader rejects it whatever the op
        }
        if (!all_ops) break;
    }
    // Twice more so reservations and a busy graph are exercised.
    for (int i = 0; i < 2; ++i) {
        auto r = m.match(text, "allocate_orelse_reserve");
        if (r.status == "allocated" || r.status == "reserved") live.push_back(r.jobid);
    }
    for (int64_t id : live) m.cancel(id, false);
    fuzz::expect_drained(m, "jobspec: after cancel");
    fuzz::expect_whole_graph_fits(m, "jobspec: after cancel");
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    std::string text(reinterpret_cast<const char *>(data), size);
    run(text, MatcherOptions{"first", "ALL:core,ALL:node", "jgf", {}}, true);
    run(text, MatcherOptions{"low", "ALL:core,ALL:node,ALL:memory", "rv1", {"*"}}, false);
    return 0;
}
