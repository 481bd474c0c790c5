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

// rv1 and rv1_nosched write nothing when R_lite records no node (none of the
// emitted nodes has a core or gpu emitted under it). flux-sched's rv1 writer
// then keeps that emission's scheduling graph and writes it ahead of the
// next R's own; a session that speaks resource-query passes one of these to
// every write to get the same. Kept as JGF text, as it was written.
struct UnprintedSchedule {
    std::string nodes, edges;  // JGF array elements, ", "-separated
};

std::string write_r(const Graph &g, const Emission &em, RFormat format, UnprintedSchedule *carry = nullptr);

}  // namespace fluxion
