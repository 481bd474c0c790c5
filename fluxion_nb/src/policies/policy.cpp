#include "policies/policy.hpp"

#include <map>
#include <sstream>

#include "util/errors.hpp"

namespace fluxion {

namespace {
const std::map<std::string, std::string> &presets() {
    static const std::map<std::string, std::string> p = {
        {"first", "policy=high node_centric=true stop_on_1_matches=true"},
        {"firstnodex", "policy=high node_centric=true node_exclusive=true stop_on_1_matches=true"},
        {"high", "policy=high"},
        {"low", "policy=low"},
        {"lonode", "policy=low node_centric=true"},
        {"hinode", "policy=high node_centric=true"},
        {"lonodex", "policy=low node_centric=true node_exclusive=true"},
        {"hinodex", "policy=high node_centric=true node_exclusive=true"},
        {"locality", "policy=high"},
        // Lowest performance class first at every level (slots excepted).
        {"variation", "policy=low"},
    };
    return p;
}
}  // namespace

std::vector<std::string> Policy::names() {
    std::vector<std::string> out;
    for (const auto &kv : presets()) out.push_back(kv.first);
    return out;
}

Policy Policy::from_name(const std::string &name) {
    Policy p;
    p.name = name;
    auto it = presets().find(name);
    std::string spec = it != presets().end() ? it->second : name;
    p.locality = name == "locality";
    p.perf_class = name == "variation";
    bool have_policy = false;
    std::istringstream in(spec);
    std::string tok;
    while (in >> tok) {
        auto eq = tok.find('=');
        if (eq == std::string::npos)
            throw InputError("match policy '" + name + "': option '" + tok + "' needs a value");
        std::string key = tok.substr(0, eq), val = tok.substr(eq + 1);
        if (key == "policy") {
            if (val != "high" && val != "low")
                throw InputError("match policy '" + name + "': policy= accepts only low or high");
            p.high = val == "high";
            have_policy = true;
            continue;
        }
        if (val != "true" && val != "false")
            throw InputError("match policy '" + name + "': " + key + " requires true or false");
        bool b = val == "true";
        if (key == "node_centric")
            p.node_centric = b;
        else if (key == "node_exclusive")
            p.node_exclusive = b;
        else if (key == "stop_on_1_matches")
            p.stop_on_1 = b;
        else
            throw InputError("match policy '" + name + "': unknown option '" + key + "'");
    }
    if (!have_policy)
        throw InputError("unknown match policy '" + name + "' (known: first, firstnodex, high, "
                         "low, hinode, lonode, hinodex, lonodex, locality, variation, or a custom "
                         "'policy=low|high ...' string)");
    return p;
}

int64_t perf_class_of(const std::map<std::string, std::string> &properties) {
    constexpr int64_t kWorst = 9999;
    auto it = properties.find("perf_class");
    if (it == properties.end()) return kWorst;
    // Read like std::stoi: optional blanks and sign, then leading digits.
    const std::string &s = it->second;
    size_t i = s.find_first_not_of(" \t\n\v\f\r");
    if (i == std::string::npos) return kWorst;
    bool neg = false;
    if (s[i] == '+' || s[i] == '-') neg = s[i++] == '-';
    if (i >= s.size() || s[i] < '0' || s[i] > '9') return kWorst;
    int64_t v = 0;
    for (; i < s.size() && s[i] >= '0' && s[i] <= '9'; ++i) {
        v = v * 10 + (s[i] - '0');
        if (v > kWorst) return kWorst;  // also what an int overflow would give
    }
    if (neg && v != 0) return kWorst;
    return v;
}

}  // namespace fluxion
