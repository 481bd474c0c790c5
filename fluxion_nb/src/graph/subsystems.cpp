#include "graph/subsystems.hpp"

#include <algorithm>
#include <cctype>
#include <map>

#include "util/errors.hpp"

namespace fluxion {

std::vector<std::string> match_subsystems(const std::string &name) {
    static const std::map<std::string, std::vector<std::string>> table = {
        {"CA", {"containment"}},
        {"IBA", {"ibnet"}},
        {"IBBA", {"ibnetbw"}},
        {"PA", {"power"}},
        {"PFS1BA", {"pfs1bw"}},
        {"C+IBA", {"containment", "ibnet"}},
        {"C+IBBA", {"containment", "ibnetbw"}},
        {"C+PA", {"containment", "power"}},
        {"C+PFS1BA", {"containment", "pfs1bw"}},
        {"IB+IBBA", {"ibnet", "ibnetbw"}},
        {"C+P+IBA", {"containment", "power", "ibnet"}},
        {"V+PFS1BA", {"virtual1", "pfs1bw"}},
        {"VA", {"virtual1"}},
        {"ALL", {"containment", "ibnet", "ibnetbw", "pfs1bw", "power"}},
    };
    for (const auto &kv : table) {
        std::string key_lower = kv.first;
        std::transform(key_lower.begin(), key_lower.end(), key_lower.begin(),
                       [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
        if (name == kv.first || name == key_lower) return kv.second;
    }
    std::string known;
    for (const auto &kv : table) known += (known.empty() ? "" : ", ") + kv.first;
    throw InputError("unknown match subsystems '" + name + "' (known: " + known + ")");
}

}  // namespace fluxion
