// Canonical jobspec (RFC 14, versions 1..9999) as the matcher needs it:
// the resource tree with counts, exclusivity and slot labels, the duration,
// the queue and RFC 31 constraints. Read from the JSON form of the document
// (YAML is converted to JSON before it reaches the core).
#pragma once
#include <climits>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "util/json.hpp"
#include "util/type_counts.hpp"

namespace fluxion {

class TypeTable;
struct Vertex;

struct Count {
    unsigned min = 1;
    unsigned max = 1;
    char oper = '+';
    unsigned operand = 1;
};

enum class Tristate { Unspecified = -1, False = 0, True = 1 };

struct Resource {
    int type = -1;
    Count count;
    Tristate exclusive = Tristate::Unspecified;
    std::string label;
    std::string unit;
    std::vector<Resource> with;
    // Filled by the matcher: minimum aggregate amount per type below this entry.
    TypeCounts user_data;
};

// RFC 31 constraint tree, evaluated against node / storage_node vertices.
class Constraint {
   public:
    virtual ~Constraint() = default;
    virtual bool match(const Vertex &v) const = 0;
};

std::unique_ptr<Constraint> parse_constraint(const json::Value &v);

struct Jobspec {
    int64_t version = 1;
    // Unique per parse (copies share it): the same serial means the same request.
    uint64_t serial = 0;
    std::vector<Resource> resources;
    double duration = 0.0;
    std::string queue;
    std::shared_ptr<Constraint> constraint;
};

// Which traverser will match the jobspec; it decides which slot forms the
// reader accepts. Simple: at most one slot per level. Flexible: also sibling
// slots ("or-slots") and xor_slot alternatives (see flexible.hpp).
enum class TraverserKind { Simple, Flexible };

// "simple" | "flexible"; throws InputError otherwise.
TraverserKind traverser_kind(const std::string &name);

// Parse and validate; throws InputError naming the offending field.
Jobspec parse_jobspec(const json::Value &doc, const TypeTable &types,
                      TraverserKind kind = TraverserKind::Simple);
Jobspec parse_jobspec_text(const std::string &json_text, const TypeTable &types,
                           TraverserKind kind = TraverserKind::Simple);

// Id sets ("0-3,7") and host lists ("node[0-3,7],login1").
std::set<int64_t> parse_idset(const std::string &s);
std::string format_idset(const std::set<int64_t> &ids);
// The same for ids already sorted (repeats allowed), appended to `out`.
void append_sorted_idset(std::string &out, const int64_t *first, const int64_t *last);
std::vector<std::string> expand_hostlist(const std::string &s);
std::string compress_hostlist(const std::vector<std::string> &hosts);
void append_hostlist(std::string &out, const std::vector<std::string_view> &hosts);

}  // namespace fluxion
