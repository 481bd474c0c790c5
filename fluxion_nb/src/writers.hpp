// Turn an Emission into the R formats flux-sched writes: simple,
// pretty_simple, jgf, rlite, rv1 and rv1_nosched.
#pragma once
#include <string>

#include "graph.hpp"
#include "traverser.hpp"

namespace fluxion {

// Throws InputError for an unknown format name.
std::string write_r(const Graph &g, const Emission &em, const std::string &format);
bool known_format(const std::string &format);

}  // namespace fluxion
