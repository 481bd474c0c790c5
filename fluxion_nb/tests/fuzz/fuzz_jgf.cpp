// libFuzzer target: the JGF reader.
//
// 1. Load the input as a whole graph. Bad input must be an InputError (never
//    another exception or a crash). A graph that loads must answer stat and
//    usage, write a one-vertex match in every R format, and drain to empty
//    after the job is cancelled; set_status and remove walk whole subtrees.
// 2. Attach the input to the small fixed graph (grow). A rejected attach
//    must leave the fixed graph exactly as it was; an accepted one must keep
//    the graph usable (the whole-graph job still fits and drains).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "fuzz_common.hpp"

using namespace fluxion;

namespace {
const char *kFormats[] = {"jgf", "simple", "pretty_simple", "rlite", "rv1", "rv1_nosched"};

std::string one_of(const std::string &type) {
    std::string t;
    json::dump_string(t, type);
    return R"({"version":9999,"resources":[{"type":)" + t +
           R"(,"count":1}],"tasks":[{"command":["x"],"slot":"s","count":{"per_slot":1}}],)"
           R"("attributes":{"system":{"duration":60}}})";
}

void load_whole(const std::string &text) {
    std::unique_ptr<Matcher> m;
    try {
        m = std::make_unique<Matcher>(text, MatcherOptions{});
    } catch (const InputError &) {
        return;
    }
    auto before = fuzz::Snapshot::of(*m);
    if (before.njobs != 0) fuzz::fail("a fresh graph has jobs");
    auto usage = m->usage();
    if (usage.empty()) return;
    // Request one of the last vertex's type, in each writer format.
    const std::string js = one_of(usage.back().type);
    for (const char *fmt : kFormats) {
        try {
            auto r = m->match(js, "without_allocating", std::nullopt, fmt);
            (void)r;
        } catch (const InputError &) {
            // e.g. a jobspec the graph's types cannot express
        }
    }
    if (fuzz::Snapshot::of(*m) != before) fuzz::fail("without_allocating changed state");
    try {
        auto r = m->match(js, "allocate");
        if (r.status == "allocated") {
            m->cancel(r.jobid, false);
            fuzz::expect_drained(*m, "jgf: after cancel");
        }
    } catch (const InputError &) {
    }
    // Whole-subtree walks: mark the root's subtree down and up, then remove
    // the last vertex's subtree (it holds no job).
    // FLUXION_FUZZ_NO_WALKS=1 skips them, to keep fuzzing the reader while
    // the known containment-cycle bug is open.
    static const bool no_walks = std::getenv("FLUXION_FUZZ_NO_WALKS") != nullptr;
    if (no_walks) return;
    const std::string root_path = usage.front().path, last_path = usage.back().path;
    try {
        m->set_status(root_path, false);
        m->set_status(root_path, true);
        m->remove(last_path);
    } catch (const InputError &) {
    } catch (const NotFoundError &) {
    } catch (const StateError &) {
    }
    fuzz::expect_drained(*m, "jgf: after remove");
}

void attach_to_small(const std::string &text) {
    Matcher m(fuzz::small_graph(), MatcherOptions{});
    auto before = fuzz::Snapshot::of(m);
    try {
        m.attach(text);
    } catch (const InputError &) {
        if (fuzz::Snapshot::of(m) != before) fuzz::fail("rejected attach changed state");
        return;
    } catch (const NotFoundError &) {
        if (fuzz::Snapshot::of(m) != before) fuzz::fail("rejected attach changed state");
        return;
    } catch (const StateError &) {
        if (fuzz::Snapshot::of(m) != before) fuzz::fail("rejected attach changed state");
        return;
    }
    fuzz::expect_drained(m, "attach: fresh vertices hold something");
    auto r = m.match(fuzz::kWholeGraph, "allocate");
    if (r.status == "allocated") {
        m.cancel(r.jobid, false);
        fuzz::expect_drained(m, "attach: after cancel");
    }
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    std::string text(reinterpret_cast<const char *>(data), size);
    load_whole(text);
    attach_to_small(text);
    return 0;
}
