// resource-query's match-subsystem names (`-S CA`, `PA`, `C+PA`, ...): each
// stands for the list of subsystems a matcher is aware of.
#pragma once
#include <string>
#include <vector>

namespace fluxion {

// The subsystems `name` stands for, the dominant one first (the one whose
// tree matching walks). Names are accepted in upper or lower case, as
// resource-query does; anything else is an InputError.
std::vector<std::string> match_subsystems(const std::string &name);

}  // namespace fluxion
