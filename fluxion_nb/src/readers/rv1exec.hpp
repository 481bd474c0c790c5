// RFC 20 R read the way flux-sched's rv1exec reader reads it to cancel part
// of a job: only the broker ranks listed in execution.R_lite count.
#pragma once
#include <cstdint>
#include <set>
#include <string>

namespace fluxion {

// The ranks of every R_lite entry of `R` (version 1). Throws InputError.
std::set<int64_t> r_lite_ranks(const std::string &R);

}  // namespace fluxion
