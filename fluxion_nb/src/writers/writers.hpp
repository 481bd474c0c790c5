// Turn an Emission into the R formats flux-sched writes: simple,
// pretty_simple, jgf, rlite, rv1 and rv1_nosched.
#pragma once
#include <string>
#include <string_view>

#include "graph/graph.hpp"
#include "traverser/traverser.hpp"

namespace fluxion {

enum class RFormat { Simple, PrettySimple, Jgf, Rlite, Rv1, Rv1Nosched };

// A format by its resource-query name; InputError for an unknown one.
RFormat r_format(std::string_view name);
std::string write_r(const Graph &g, const Emission &em, RFormat format);

}  // namespace fluxion
