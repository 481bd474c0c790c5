#include "readers/rv1exec.hpp"

#include "util/errors.hpp"
#include "jobspec/jobspec.hpp"
#include "util/json.hpp"

namespace fluxion {

std::set<int64_t> r_lite_ranks(const std::string &R) {
    json::Value doc = json::parse(R);
    if (!doc.is_object()) throw InputError("R: the document must be an object");
    const json::Value *version = doc.find("version");
    if (!version || !version->is_int() || version->as_int() != 1)
        throw InputError("R: 'version' must be 1");
    const json::Value *exec = doc.find("execution");
    const json::Value *rlite = exec && exec->is_object() ? exec->find("R_lite") : nullptr;
    if (!rlite || !rlite->is_array()) throw InputError("R: no 'execution.R_lite' array in it");
    std::set<int64_t> ranks;
    for (const auto &entry : rlite->items()) {
        const json::Value *rank = entry.is_object() ? entry.find("rank") : nullptr;
        if (!rank || !rank->is_string()) throw InputError("R: every R_lite entry needs a 'rank' idset string");
        std::set<int64_t> ids = parse_idset(rank->as_string());
        ranks.insert(ids.begin(), ids.end());
    }
    return ranks;
}

}  // namespace fluxion
