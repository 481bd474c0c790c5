#include "jobspec/jobspec.hpp"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <charconv>
#include <cmath>
#include <sstream>

#include "util/errors.hpp"
#include "traverser/flexible.hpp"
#include "graph/graph.hpp"

namespace fluxion {

namespace {

[[noreturn]] void bad(const std::string &where, const std::string &what) {
    throw InputError("jobspec: " + where + ": " + what);
}

unsigned read_unsigned(const json::Value &v, const std::string &where) {
    if (v.is_int()) {
        if (v.as_int() < 0 || v.as_int() > static_cast<int64_t>(UINT_MAX))
            bad(where, "must be a non-negative integer");
        return static_cast<unsigned>(v.as_int());
    }
    if (v.is_string()) {
        const std::string &s = v.as_string();
        if (s.empty() || !std::all_of(s.begin(), s.end(), ::isdigit)) bad(where, "must be an integer");
        // Digits only, so the value only has to be compared with the limit;
        // no conversion can go out of range.
        size_t nz = s.find_first_not_of('0');
        std::string digits = nz == std::string::npos ? std::string("0") : s.substr(nz);
        const std::string limit = std::to_string(UINT_MAX);
        if (digits.size() > limit.size() || (digits.size() == limit.size() && digits > limit))
            bad(where, "is too large (" + s + "); the largest accepted value is " + limit);
        return static_cast<unsigned>(std::stoul(digits));
    }
    bad(where, "must be an integer");
}

Count read_count(const json::Value &v, const std::string &where) {
    Count c;
    if (v.is_int() || v.is_string()) {
        c.min = c.max = read_unsigned(v, where);
        if (c.min < 1) bad(where, "count must be at least 1");
        return c;
    }
    if (!v.is_object()) bad(where, "count must be an integer or a mapping");
    const json::Value *mn = v.find("min");
    if (!mn) bad(where, "count mapping needs 'min'");
    for (const auto &kv : v.members())
        if (kv.first != "min" && kv.first != "max" && kv.first != "operator" && kv.first != "operand")
            bad(where, "unknown count key '" + kv.first + "'");
    c.min = read_unsigned(*mn, where + ".min");
    if (c.min < 1) bad(where, "count.min must be at least 1");
    const json::Value *mx = v.find("max");
    const json::Value *op = v.find("operator");
    const json::Value *od = v.find("operand");
    if (!mx && !op && !od) {
        c.max = UINT_MAX;
        c.oper = '+';
        c.operand = 1;
        return c;
    }
    // As Fluxion's jobspec reader: a range is min, max, operator and operand together.
    if (!mx || !op || !od) bad(where, "count needs all or none of 'max', 'operator' and 'operand'");
    c.max = read_unsigned(*mx, where + ".max");
    if (!op->is_string() || op->as_string().size() != 1 ||
        std::string("+*^").find(op->as_string()[0]) == std::string::npos)
        bad(where, "count.operator must be one of '+', '*', '^'");
    c.oper = op->as_string()[0];
    c.operand = read_unsigned(*od, where + ".operand");
    if (c.max < c.min) bad(where, "count.max is smaller than count.min");
    if (c.oper == '+' && c.operand < 1) bad(where, "count.operand must be >= 1 for '+'");
    if (c.oper == '*' && c.operand < 2) bad(where, "count.operand must be >= 2 for '*'");
    if (c.oper == '^' && (c.operand < 2 || c.min < 2))
        bad(where, "'^' needs count.operand >= 2 and count.min >= 2");
    return c;
}

// Fluxion's DFU traverser gives up on a level that holds more than one slot
// ("siblings in jobspec request same resource type"), so such a request could
// never match; say so instead of reporting it busy or unsatisfiable.
void check_sibling_slots(const std::vector<Resource> &rs, int slot_type, const std::string &where) {
    std::vector<std::string> labels;
    for (const auto &r : rs)
        if (r.type == slot_type) labels.push_back("'" + r.label + "'");
    if (labels.size() < 2) return;
    std::string names;
    for (const auto &l : labels) names += (names.empty() ? "" : ", ") + l;
    bad(where, std::to_string(labels.size()) + " sibling slots (" + names +
                   ") at one level; the simple traverser takes one slot per level, so use a single slot "
                   "(with a count), match each slot shape as its own jobspec, or use the flexible "
                   "traverser");
}

// The slot forms a level may hold depend on the traverser.
void check_level(const std::vector<Resource> &rs, const TypeTable &types, const std::string &where,
                 TraverserKind kind) {
    if (kind == TraverserKind::Flexible)
        check_flexible_level(rs, types, where);
    else
        check_sibling_slots(rs, types.slot, where);
}

// A YAML scalar's text (string, integer, number or boolean); false for
// anything else (null, a sequence, a mapping).
bool scalar_text(const json::Value &v, std::string &out) {
    if (v.is_string()) {
        out = v.as_string();
    } else if (v.is_int()) {
        out = std::to_string(v.as_int());
    } else if (v.is_bool()) {
        out = v.as_bool() ? "true" : "false";
    } else if (v.is_number()) {
        std::ostringstream s;
        s << v.as_double();
        out = s.str();
    } else {
        return false;
    }
    return true;
}

Resource read_resource(const json::Value &v, const TypeTable &types, const std::string &where,
                       TraverserKind kind) {
    if (!v.is_object()) bad(where, "a resource must be a mapping");
    Resource r;
    const json::Value *type = v.find("type");
    const json::Value *count = v.find("count");
    if (!type || !type->is_string()) bad(where, "resource needs a string 'type'");
    if (!count) bad(where, "resource '" + type->as_string() + "' needs a 'count'");
    std::string w = where + "(" + type->as_string() + ")";
    for (const auto &kv : v.members()) {
        const std::string &k = kv.first;
        if (k != "type" && k != "count" && k != "unit" && k != "exclusive" && k != "with" &&
            k != "label" && k != "id")
            bad(w, "unknown resource key '" + k + "'");
    }
    r.type = types.find(type->as_string());
    if (r.type < 0)
        throw UnknownTypeError("jobspec: " + where + ": '" + type->as_string() +
                               "' is not a resource type known to fluxion (one of the graph's, a built-in "
                               "or one named in a prune filter)");
    if (r.type == types.xor_slot && kind != TraverserKind::Flexible)
        bad(w, "xor_slot (one of several alternative slots) needs the flexible traverser");
    r.count = read_count(*count, w + ".count");
    if (const json::Value *ex = v.find("exclusive")) {
        if (ex->is_bool())
            r.exclusive = ex->as_bool() ? Tristate::True : Tristate::False;
        else if (ex->is_string() && (ex->as_string() == "true" || ex->as_string() == "false"))
            r.exclusive = ex->as_string() == "true" ? Tristate::True : Tristate::False;
        else
            bad(w, "'exclusive' must be true or false");
    }
    // Fluxion's reader takes any YAML scalar here, as text.
    if (const json::Value *l = v.find("label")) {
        if (!scalar_text(*l, r.label)) bad(w, "'label' must be a scalar");
    }
    if (const json::Value *u = v.find("unit")) {
        if (!scalar_text(*u, r.unit)) bad(w, "'unit' must be a scalar");
    }
    if (const json::Value *id = v.find("id")) {
        std::string ignored;
        if (!scalar_text(*id, ignored)) bad(w, "'id' must be a scalar");
    }
    if (r.type == types.slot && r.label.empty()) bad(w, "all slots must be labeled");
    if (const json::Value *with = v.find("with")) {
        if (!with->is_array() || with->items().empty()) bad(w, "'with' must be a non-empty sequence");
        for (size_t i = 0; i < with->items().size(); ++i)
            r.with.push_back(
                read_resource(with->items()[i], types, w + ".with[" + std::to_string(i) + "]", kind));
        check_level(r.with, types, w + ".with", kind);
    }
    return r;
}

class PropertyConstraint : public Constraint {
   public:
    explicit PropertyConstraint(std::vector<std::string> p) : props_(std::move(p)) {}
    bool match(const Vertex &v) const override {
        for (const auto &p : props_) {
            bool negate = !p.empty() && p[0] == '^';
            std::string name = negate ? p.substr(1) : p;
            bool has = v.properties.count(name) > 0;
            if (has == negate) return false;
        }
        return true;
    }

   private:
    std::vector<std::string> props_;
};

class HostlistConstraint : public Constraint {
   public:
    explicit HostlistConstraint(std::set<std::string> h) : hosts_(std::move(h)) {}
    bool match(const Vertex &v) const override { return hosts_.count(std::string(v.name)) > 0; }

   private:
    std::set<std::string> hosts_;
};

class RankConstraint : public Constraint {
   public:
    explicit RankConstraint(std::set<int64_t> r) : ranks_(std::move(r)) {}
    bool match(const Vertex &v) const override { return ranks_.count(v.rank) > 0; }

   private:
    std::set<int64_t> ranks_;
};

class BoolConstraint : public Constraint {
   public:
    enum Op { And, Or, Not };
    BoolConstraint(Op op, std::vector<std::unique_ptr<Constraint>> c) : op_(op), kids_(std::move(c)) {}
    bool match(const Vertex &v) const override {
        switch (op_) {
            case And:
                for (const auto &k : kids_)
                    if (!k->match(v)) return false;
                return true;
            case Or:
                for (const auto &k : kids_)
                    if (k->match(v)) return true;
                return false;
            case Not:
                // RFC 31: "not" negates the conjunction of its entries.
                for (const auto &k : kids_)
                    if (!k->match(v)) return true;
                return false;
        }
        return false;
    }

   private:
    Op op_;
    std::vector<std::unique_ptr<Constraint>> kids_;
};

std::vector<std::string> string_list(const json::Value &v, const std::string &what) {
    if (!v.is_array()) throw InputError("constraint: '" + what + "' must be a list of strings");
    std::vector<std::string> out;
    for (const auto &i : v.items()) {
        if (!i.is_string()) throw InputError("constraint: '" + what + "' entries must be strings");
        out.push_back(i.as_string());
    }
    return out;
}

// Ranks and hosts: each entry a scalar read as text (a rank may be 3 or "0-3").
std::vector<std::string> scalar_list(const json::Value &v, const std::string &what) {
    if (!v.is_array()) throw InputError("constraint: '" + what + "' must be a list");
    std::vector<std::string> out;
    for (const auto &i : v.items()) {
        std::string text;
        if (!scalar_text(i, text)) throw InputError("constraint: '" + what + "' entries must be scalars");
        out.push_back(std::move(text));
    }
    return out;
}

}  // namespace

std::unique_ptr<Constraint> parse_constraint(const json::Value &v) {
    if (!v.is_object()) throw InputError("constraint: must be a mapping");
    if (v.members().size() > 1) throw InputError("constraint: a mapping holds one operator, not several");
    std::vector<std::unique_ptr<Constraint>> parts;
    for (const auto &kv : v.members()) {
        const std::string &op = kv.first;
        if (op == "properties") {
            auto props = string_list(kv.second, op);
            for (const auto &p : props) {
                std::string name = !p.empty() && p[0] == '^' ? p.substr(1) : p;
                if (name.find_first_of("!&'\"^`|()") != std::string::npos)
                    throw InputError("constraint: invalid property name '" + p + "'");
            }
            parts.push_back(std::make_unique<PropertyConstraint>(std::move(props)));
        } else if (op == "hostlist") {
            std::set<std::string> hosts;
            for (const auto &h : scalar_list(kv.second, op))
                for (auto &x : expand_hostlist(h)) hosts.insert(x);
            parts.push_back(std::make_unique<HostlistConstraint>(std::move(hosts)));
        } else if (op == "ranks") {
            std::set<int64_t> ranks;
            for (const auto &r : scalar_list(kv.second, op))
                for (auto x : parse_idset(r)) ranks.insert(x);
            parts.push_back(std::make_unique<RankConstraint>(std::move(ranks)));
        } else if (op == "and" || op == "or" || op == "not") {
            if (!kv.second.is_array()) throw InputError("constraint: '" + op + "' must be a list");
            std::vector<std::unique_ptr<Constraint>> kids;
            for (const auto &c : kv.second.items()) kids.push_back(parse_constraint(c));
            auto o = op == "and" ? BoolConstraint::And : op == "or" ? BoolConstraint::Or : BoolConstraint::Not;
            parts.push_back(std::make_unique<BoolConstraint>(o, std::move(kids)));
        } else {
            throw InputError("constraint: unknown operator '" + op + "'");
        }
    }
    if (parts.size() == 1) return std::move(parts[0]);
    return std::make_unique<BoolConstraint>(BoolConstraint::And, std::move(parts));
}

TraverserKind traverser_kind(const std::string &name) {
    if (name == "simple") return TraverserKind::Simple;
    if (name == "flexible") return TraverserKind::Flexible;
    throw InputError("unknown traverser '" + name + "' (expected simple or flexible)");
}

Jobspec parse_jobspec(const json::Value &doc, const TypeTable &types, TraverserKind kind) {
    if (!doc.is_object()) bad("document", "must be a mapping");
    for (const auto &kv : doc.members())
        if (kv.first != "version" && kv.first != "resources" && kv.first != "tasks" &&
            kv.first != "attributes")
            bad("document", "unknown top-level key '" + kv.first + "'");
    Jobspec js;
    static std::atomic<uint64_t> serials{0};
    js.serial = ++serials;
    const json::Value *ver = doc.find("version");
    if (!ver) bad("document", "missing 'version'");
    if (!ver->is_int() || ver->as_int() < 1 || ver->as_int() > 9999)
        bad("version", "must be an integer from 1 to 9999");
    js.version = ver->as_int();
    const json::Value *res = doc.find("resources");
    if (!res) bad("document", "missing 'resources'");
    if (!res->is_array() || res->items().empty()) bad("resources", "must be a non-empty sequence");
    for (size_t i = 0; i < res->items().size(); ++i)
        js.resources.push_back(
            read_resource(res->items()[i], types, "resources[" + std::to_string(i) + "]", kind));
    check_level(js.resources, types, "resources", kind);
    if (kind == TraverserKind::Flexible) check_xor_expansion(js.resources, types);
    const json::Value *tasks = doc.find("tasks");
    if (!tasks) bad("document", "missing 'tasks'");
    if (!tasks->is_array()) bad("tasks", "must be a sequence");
    for (size_t i = 0; i < tasks->items().size(); ++i) {
        const json::Value &t = tasks->items()[i];
        std::string w = "tasks[" + std::to_string(i) + "]";
        if (!t.is_object()) bad(w, "must be a mapping");
        const json::Value *cmd = t.find("command");
        if (!cmd || !cmd->is_array()) bad(w, "needs a 'command' sequence");
        const json::Value *slot = t.find("slot");
        if (!slot || !(slot->is_string() || slot->is_int())) bad(w, "needs a 'slot' name");
        const json::Value *cnt = t.find("count");
        if (!cnt || !cnt->is_object() || cnt->members().size() != 1)
            bad(w, "needs a 'count' mapping with one entry (per_slot or total)");
        if (const json::Value *d = t.find("distribution"); d && (d->is_array() || d->is_object()))
            bad(w, "'distribution' must be a scalar");
        if (const json::Value *a = t.find("attributes"); a && !a->is_object())
            bad(w, "'attributes' must be a mapping");
        // Fluxion's reader counts a task's entries rather than naming them.
        if (t.members().size() > 5) bad(w, "has more entries than command, slot, count, distribution, attributes");
    }
    const json::Value *attrs = doc.find("attributes");
    if (!attrs) bad("document", "missing 'attributes'");
    if (!attrs->is_null()) {
        if (!attrs->is_object()) bad("attributes", "must be a mapping");
        for (const auto &kv : attrs->members()) {
            if (kv.first == "user") continue;
            if (kv.first != "system") bad("attributes", "unknown key '" + kv.first + "'");
            const json::Value &sys = kv.second;
            if (sys.is_null()) continue;
            if (!sys.is_object()) bad("attributes.system", "must be a mapping");
            if (const json::Value *d = sys.find("duration")) {
                if (!d->is_number()) bad("attributes.system.duration", "must be a number");
                js.duration = d->as_double();
                if (!(js.duration >= 0)) bad("attributes.system.duration", "must not be negative");
            }
            if (const json::Value *q = sys.find("queue")) {
                if (!q->is_string()) bad("attributes.system.queue", "must be a string");
                js.queue = q->as_string();
            }
            if (const json::Value *c = sys.find("constraints"); c && !c->is_null()) {
                if (!(c->is_object() && c->members().empty())) js.constraint = parse_constraint(*c);
            }
        }
    }
    return js;
}

Jobspec parse_jobspec_text(const std::string &json_text, const TypeTable &types, TraverserKind kind) {
    return parse_jobspec(json::parse(json_text), types, kind);
}

std::set<int64_t> parse_idset(const std::string &s) {
    std::set<int64_t> out;
    std::string body = s;
    if (!body.empty() && body.front() == '[' && body.back() == ']') body = body.substr(1, body.size() - 2);
    size_t p = 0;
    while (p <= body.size()) {
        size_t c = body.find(',', p);
        std::string tok = body.substr(p, c == std::string::npos ? std::string::npos : c - p);
        if (tok.empty()) throw InputError("idset '" + s + "': empty element");
        size_t dash = tok.find('-');
        try {
            if (dash == std::string::npos) {
                out.insert(std::stoll(tok));
            } else {
                int64_t a = std::stoll(tok.substr(0, dash)), b = std::stoll(tok.substr(dash + 1));
                if (b < a || b - a > 10000000) throw InputError("idset '" + s + "': bad range");
                for (int64_t x = a; x <= b; ++x) out.insert(x);
            }
        } catch (const InputError &) {
            throw;
        } catch (...) {
            throw InputError("idset '" + s + "': not a number in '" + tok + "'");
        }
        if (c == std::string::npos) break;
        p = c + 1;
    }
    return out;
}

namespace {
// Ids in increasing order; a repeated id is written once.
template <class It>
void append_idset(std::string &out, It it, It end) {
    bool first = true;
    while (it != end) {
        int64_t a = *it, b = a;
        It nx = std::next(it);
        while (nx != end && (*nx == b + 1 || *nx == b)) {
            b = *nx;
            ++nx;
        }
        if (!first) out += ',';
        first = false;
        json::append_int(out, a);
        if (b > a) {
            out += '-';
            json::append_int(out, b);
        }
        it = nx;
    }
}
}  // namespace

std::string format_idset(const std::set<int64_t> &ids) {
    std::string out;
    append_idset(out, ids.begin(), ids.end());
    return out;
}

void append_sorted_idset(std::string &out, const int64_t *first, const int64_t *last) {
    append_idset(out, first, last);
}

namespace {
// A hostlist names hosts of one graph; a range this long is a mistake, and
// expanding it would only exhaust memory.
constexpr long long kMaxHostlistRange = 1000000;
constexpr size_t kMaxHostlistHosts = 1000000;
}  // namespace

std::vector<std::string> expand_hostlist(const std::string &s) {
    std::vector<std::string> out;
    size_t p = 0;
    while (p < s.size()) {
        // Find the end of this host expression (a comma outside brackets).
        size_t q = p;
        int depth = 0;
        while (q < s.size() && !(s[q] == ',' && depth == 0)) {
            if (s[q] == '[') ++depth;
            if (s[q] == ']') --depth;
            ++q;
        }
        std::string expr = s.substr(p, q - p);
        size_t lb = expr.find('[');
        if (lb == std::string::npos) {
            if (!expr.empty()) out.push_back(expr);
        } else {
            size_t rb = expr.find(']', lb);
            if (rb == std::string::npos) throw InputError("hostlist '" + s + "': missing ']'");
            std::string prefix = expr.substr(0, lb), suffix = expr.substr(rb + 1);
            std::string ranges = expr.substr(lb + 1, rb - lb - 1);
            size_t r = 0;
            while (r <= ranges.size()) {
                size_t c = ranges.find(',', r);
                std::string tok = ranges.substr(r, c == std::string::npos ? std::string::npos : c - r);
                size_t dash = tok.find('-');
                std::string a = dash == std::string::npos ? tok : tok.substr(0, dash);
                std::string b = dash == std::string::npos ? tok : tok.substr(dash + 1);
                if (a.empty() || b.empty() || !std::all_of(a.begin(), a.end(), ::isdigit) ||
                    !std::all_of(b.begin(), b.end(), ::isdigit))
                    throw InputError("hostlist '" + s + "': bad range '" + tok + "'");
                // Bounds are digits only; more than 18 of them (leading zeros
                // aside) cannot be an int64 host number.
                auto too_long = [](const std::string &d) {
                    size_t nz = d.find_first_not_of('0');
                    return nz != std::string::npos && d.size() - nz > 18;
                };
                if (too_long(a) || too_long(b))
                    throw InputError("hostlist '" + s + "': range bound in '" + tok +
                                     "' is too large; host numbers must have at most 18 digits");
                long long x = std::stoll(a), y = std::stoll(b);
                if (y < x)
                    throw InputError("hostlist '" + s + "': bad range '" + tok +
                                     "' (the upper bound is below the lower one)");
                if (y - x >= kMaxHostlistRange ||
                    out.size() + static_cast<size_t>(y - x) >= kMaxHostlistHosts)
                    throw InputError("hostlist '" + s + "': range '" + tok + "' names too many hosts (at most " +
                                     std::to_string(kMaxHostlistHosts) + " in one hostlist)");
                for (long long k = x; k <= y; ++k) {
                    std::string num = std::to_string(k);
                    if (num.size() < a.size()) num = std::string(a.size() - num.size(), '0') + num;
                    out.push_back(prefix + num + suffix);
                }
                if (c == std::string::npos) break;
                r = c + 1;
            }
        }
        p = q + 1;
    }
    return out;
}

std::string compress_hostlist(const std::vector<std::string> &hosts) {
    std::vector<std::string_view> views(hosts.begin(), hosts.end());
    std::string out;
    append_hostlist(out, views);
    return out;
}

namespace {
// Zeros printed before n at width w.
size_t padding(long long n, size_t w) {
    size_t digits = std::to_string(n).size();
    return w > digits ? w - digits : 0;
}

// Can a range starting at lo, printed at `width`, take n printed at `w`? As libhostlist's
// width_equiv: the widths are equal, or one of them prints both numbers with the zeros
// they already have (2 and 16 join: neither has any). `width` becomes that one.
bool same_padding(long long lo, size_t &width, long long n, size_t w) {
    if (width == w) return true;
    for (size_t both : {width, w}) {
        if (padding(lo, both) == padding(lo, width) && padding(n, both) == padding(n, w)) {
            width = both;
            return true;
        }
    }
    return false;
}
}  // namespace

void append_hostlist(std::string &out, const std::vector<std::string_view> &hosts) {
    // Group consecutive hosts sharing a prefix and differing in a trailing number.
    auto split = [](std::string_view h, std::string_view &prefix, std::string_view &digits) {
        size_t k = h.size();
        while (k > 0 && std::isdigit(static_cast<unsigned char>(h[k - 1]))) --k;
        // A number too long for int64 is not grouped: the host stays as is.
        if (h.size() - k > 18) k = h.size();
        prefix = h.substr(0, k);
        digits = h.substr(k);
    };
    auto number = [](std::string_view d) {
        long long n = 0;
        std::from_chars(d.data(), d.data() + d.size(), n);
        return n;
    };
    const size_t start = out.size();
    size_t i = 0;
    std::vector<std::pair<long long, std::string_view>> nums;
    while (i < hosts.size()) {
        std::string_view prefix, digits;
        split(hosts[i], prefix, digits);
        if (out.size() > start) out += ',';
        if (digits.empty()) {
            out += hosts[i++];
            continue;
        }
        nums.clear();
        size_t j = i;
        while (j < hosts.size()) {
            std::string_view p2, d2;
            split(hosts[j], p2, d2);
            if (p2 != prefix || d2.empty()) break;
            nums.emplace_back(number(d2), d2);
            ++j;
        }
        if (nums.size() == 1) {
            out += hosts[i];
        } else {
            out += prefix;
            out += '[';
            size_t k = 0;
            bool first = true;
            while (k < nums.size()) {
                size_t m = k;
                size_t width = nums[k].second.size();
                while (m + 1 < nums.size() && nums[m + 1].first == nums[m].first + 1 &&
                       same_padding(nums[k].first, width, nums[m + 1].first,
                                    nums[m + 1].second.size()))
                    ++m;
                if (!first) out += ',';
                first = false;
                out += nums[k].second;
                if (m > k) {
                    out += '-';
                    out += nums[m].second;
                }
                k = m + 1;
            }
            out += ']';
        }
        i = j;
    }
}

}  // namespace fluxion
