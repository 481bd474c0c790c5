// Match policies: how candidate resources are ranked and how far the
// search goes. The names and their meanings follow flux-sched.
#pragma once
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

    // Accepts the named policies (first, firstnodex, high, low, hinode, lonode,
    // hinodex, lonodex, locality) and custom strings such as
    // "policy=low node_centric=true". Throws InputError otherwise.
    static Policy from_name(const std::string &name);
    static std::vector<std::string> names();
};

}  // namespace fluxion
