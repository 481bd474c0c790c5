// Shared helpers of the libFuzzer targets: the small fixed graph the jobspec
// and update targets run against, snapshots of a matcher's observable state,
// and a hard failure for broken invariants (libFuzzer records it as a crash).
#pragma once
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "util/errors.hpp"
#include "matcher.hpp"

#ifndef FLUXION_FUZZ_GRAPH
#error "FLUXION_FUZZ_GRAPH must name the fixed JGF file (set by CMake)"
#endif

namespace fuzz {

// The JGF of the fixed graph (fluxion_nb/tests/fuzz/small_graph.json):
// cluster0/rack0/node{0,1}/socket{0,1}/{core x2, gpu, memory[16]}.
inline const std::string &small_graph() {
    static const std::string text = [] {
        std::ifstream in(FLUXION_FUZZ_GRAPH);
        std::stringstream ss;
        ss << in.rdbuf();
        if (ss.str().empty()) {
            std::fprintf(stderr, "cannot read %s\n", FLUXION_FUZZ_GRAPH);
            std::abort();
        }
        return ss.str();
    }();
    return text;
}

[[noreturn]] inline void fail(const char *what, const std::string &detail = "") {
    std::fprintf(stderr, "INVARIANT BROKEN: %s %s\n", what, detail.c_str());
    std::fflush(stderr);
    std::abort();
}

// Everything a caller can observe about a matcher's state.
struct Snapshot {
    std::vector<std::tuple<std::string, std::string, int64_t, int64_t>> usage;
    std::vector<std::tuple<int64_t, std::string, int64_t, int64_t>> jobs;
    int64_t vertices = 0, edges = 0, njobs = 0, next = 0;

    static Snapshot of(const fluxion::Matcher &m) {
        Snapshot s;
        for (const auto &u : m.usage()) s.usage.emplace_back(u.path, u.type, u.size, u.used);
        for (const auto &j : m.jobs()) s.jobs.emplace_back(j.jobid, j.state, j.at, j.duration);
        auto st = m.stat();
        s.vertices = st.vertices;
        s.edges = st.edges;
        s.njobs = st.jobs;
        s.next = m.next_jobid();
        return s;
    }
    bool operator==(const Snapshot &o) const {
        return usage == o.usage && jobs == o.jobs && vertices == o.vertices && edges == o.edges &&
               njobs == o.njobs && next == o.next;
    }
    bool operator!=(const Snapshot &o) const { return !(*this == o); }
};

// No vertex holds anything and no job is live.
inline void expect_drained(const fluxion::Matcher &m, const char *when) {
    for (const auto &u : m.usage())
        if (u.used != 0) fail(when, "vertex " + u.path + " still holds " + std::to_string(u.used));
    if (m.stat().jobs != 0) fail(when, "live jobs remain");
}

// Whole-graph jobspec: both nodes exclusively, with everything under them.
// It fits on a drained small graph and on nothing less.
inline const char *kWholeGraph =
    R"({"version":9999,"resources":[{"type":"node","count":2,"exclusive":true,"with":[
        {"type":"socket","count":2,"with":[{"type":"core","count":2},{"type":"gpu","count":1},
        {"type":"memory","count":16}]}]}],
        "tasks":[{"command":["x"],"slot":"s","count":{"per_slot":1}}],
        "attributes":{"system":{"duration":60}}})";

inline void expect_whole_graph_fits(fluxion::Matcher &m, const char *when) {
    auto r = m.match(kWholeGraph, "allocate");
    if (r.status != "allocated") fail(when, "whole-graph job did not fit: " + r.status + " " + r.error);
    m.cancel(r.jobid, false);
    expect_drained(m, when);
}

}  // namespace fuzz
