// Match policies: how candidate resources are ranked and how far the
// search goes. The names and their meanings follow flux-sched.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace fluxion {

struct Policy {
    std::string name = "first";
    bool high = true;              // prefer higher vertex ids (else lower)
    bool node_centric = false;     // rank primarily by the enclosing node's id
    bool node_exclusive = false;   // any node touched is allocated whole
    bool stop_on_1 = false;        // first-match: stop once enough is found
    bool locality = false;         // prefer contiguous id intervals
    // variation: a vertex scores its performance class (lowest preferred)
    // instead of its id, so a job stays within one class where it can.
    bool perf_class = false;

    // Accepts the named policies (first, firstnodex, high, low, hinode, lonode,
    // hinodex, lonodex, locality, variation) and custom strings such as
    // "policy=low node_centric=true". Throws InputError otherwise.
    static Policy from_name(const std::string &name);
    static std::vector<std::string> names();
};

// A vertex's performance class for the variation policy: its `perf_class`
// property as an integer in [0, 9999]; anything else (absent, not a
// number, out of range) counts as the worst class, 9999.
int64_t perf_class_of(const std::map<std::string, std::string> &properties);

}  // namespace fluxion
