// libFuzzer target: the fast YAML reader (yaml_subset_to_json).
//
// Invariants: any input is accepted or declined, never a crash or an
// escaping exception; an accepted text gives JSON that both JSON readers of
// the core take and read alike; that JSON, read again by the YAML reader,
// is declined (it may hold characters YAML wants escaped) or read back to
// the very same text.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_common.hpp"
#include "util/json.hpp"
#include "jobspec/yaml_subset.hpp"

using namespace fluxion;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    std::string text(reinterpret_cast<const char *>(data), size);
    std::string out;
    if (!yaml_subset_to_json(text, out)) return 0;
    std::string dumped;
    try {
        dumped = json::dump(json::parse(out));
        if (json::dump(json::to_value(json::parse_document(out).root())) != dumped)
            fuzz::fail("parse and parse_document read the output differently", out);
    } catch (const InputError &e) {
        fuzz::fail("accepted YAML gave text the JSON reader rejects", std::string(e.what()) + " in: " + out);
    }
    std::string again;
    if (yaml_subset_to_json(out, again) && again != out)
        fuzz::fail("the output read as YAML is not a fixed point", out + " vs " + again);
    return 0;
}
