#include "traverser/find.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <exception>
#include <map>

#include "util/errors.hpp"
#include "jobspec/jobspec.hpp"

namespace fluxion {

namespace {

std::string lower(std::string s) {
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return s;
}

bool is_space(char c) { return c == ' ' || c == '\t'; }

// Job ids as written on the command line: decimal or 0x-prefixed hex.
bool parse_jobid(const std::string &s, int64_t &out) {
    if (s.empty()) return false;
    int base = 10;
    size_t start = 0;
    if (s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
        base = 16;
        start = 2;
    }
    errno = 0;
    char *end = nullptr;
    unsigned long long v = std::strtoull(s.c_str() + start, &end, base);
    if (errno != 0 || end == s.c_str() + start || *end != '\0' || s[start] == '-' || s[start] == '+')
        return false;
    out = static_cast<int64_t>(v);
    return true;
}

}  // namespace

// A leaf holds one predicate; an inner node folds its children left to right.
struct FindCriteria::Node {
    enum class Op { And, Or };
    // leaf
    bool leaf = false;
    std::string key, value;  // value lower-cased; job ids are read from the original text
    int64_t jobid = 0;
    std::set<std::string> names;
    // inner
    std::vector<std::pair<Op, std::shared_ptr<const Node>>> terms;  // first op unused
};

namespace {

using NodeP = std::shared_ptr<const FindCriteria::Node>;

struct Parser {
    const std::string &e;
    bool agfilter = false;
    int64_t jobid = 0;

    [[noreturn]] void fail(const std::string &why) const {
        throw InputError("find: invalid criteria '" + e + "': " + why);
    }

    NodeP leaf(const std::string &tok) {
        size_t eq = tok.find('=');
        if (eq == std::string::npos) fail("'" + tok + "' is not key=value");
        auto n = std::make_shared<FindCriteria::Node>();
        n->leaf = true;
        n->key = tok.substr(0, eq);
        std::string raw = tok.substr(eq + 1);
        n->value = lower(raw);
        const std::string &k = n->key, &x = n->value;
        if (k == "status") {
            if (x != "up" && x != "down") fail("status is up or down");
        } else if (k == "sched-now") {
            if (x != "allocated" && x != "free") fail("sched-now is allocated or free");
        } else if (k == "sched-future") {
            if (x != "reserved" && x != "free") fail("sched-future is reserved or free");
        } else if (k == "jobid-alloc" || k == "jobid-span" || k == "jobid-tag" || k == "jobid-reserved") {
            if (!parse_jobid(raw, n->jobid)) fail("bad job id '" + raw + "'");
            jobid = n->jobid;
        } else if (k == "agfilter") {
            if (x != "true" && x != "t" && x != "false" && x != "f") fail("agfilter is true or false");
            agfilter = x == "true" || x == "t";
        } else if (k == "names") {
            try {
                for (auto &h : expand_hostlist(x)) n->names.insert(h);
            } catch (const std::exception &ex) {
                // Out-of-range numbers in a range are a bad expression too.
                fail(std::string("bad host list: ") + ex.what());
            }
        } else if (k == "property") {
            if (x.empty()) fail("empty property");
        } else {
            fail("unknown predicate '" + k + "'");
        }
        return n;
    }

    // Parse the whole of e[from, to).
    NodeP expr(size_t from, size_t to) {
        auto n = std::make_shared<FindCriteria::Node>();
        size_t at = from;
        auto skip = [&] {
            while (at < to && is_space(e[at])) ++at;
        };
        skip();
        if (at >= to) fail("empty expression");
        FindCriteria::Node::Op op = FindCriteria::Node::Op::And;
        while (true) {
            n->terms.emplace_back(op, term(at, to));
            if (at < to && !is_space(e[at])) fail("expected a space after a term");
            skip();
            if (at >= to) break;
            size_t w = at;
            while (w < to && !is_space(e[w])) ++w;
            std::string word = e.substr(at, w - at);
            op = FindCriteria::Node::Op::And;
            if (word == "and" || word == "or") {
                if (word == "or") op = FindCriteria::Node::Op::Or;
                at = w;
                skip();
                if (at >= to) fail("dangling '" + word + "'");
            }
        }
        return n->terms.size() == 1 ? n->terms[0].second : n;
    }

    // One term starting at `at`; leaves `at` just past it.
    NodeP term(size_t &at, size_t to) {
        if (e[at] == '(') {
            int bal = 0;
            size_t p = at;
            for (; p < to; ++p) {
                if (e[p] == '(') ++bal;
                if (e[p] == ')' && --bal == 0) break;
            }
            if (p >= to) fail("unbalanced parenthesis");
            NodeP inner = expr(at + 1, p);
            at = p + 1;
            return inner;
        }
        size_t w = at;
        while (w < to && !is_space(e[w])) ++w;
        NodeP l = leaf(e.substr(at, w - at));
        at = w;
        return l;
    }
};

bool eval_node(const FindCriteria::Node &n, const Graph &g, int v, const FindCriteria::Inherited &in) {
    if (!n.leaf) {
        bool r = false;
        bool first = true;
        for (const auto &t : n.terms) {
            bool x = eval_node(*t.second, g, v, in);
            if (first)
                r = x;
            else
                r = t.first == FindCriteria::Node::Op::And ? (r && x) : (r || x);
            first = false;
        }
        return r;
    }
    const Vertex &vx = g.vertices[static_cast<size_t>(v)];
    const std::string &k = n.key, &x = n.value;
    if (k == "status") return x == "down" ? in.down : !in.down;
    if (k == "sched-now") return x == "allocated" ? in.allocated : !in.allocated;
    if (k == "sched-future") return x == "reserved" ? in.reserved : !in.reserved;
    if (k == "jobid-alloc") return vx.allocations.count(n.jobid) > 0;
    if (k == "jobid-reserved") return vx.reservations.count(n.jobid) > 0;
    if (k == "jobid-span") return vx.job2span.count(n.jobid) > 0;
    if (k == "jobid-tag") return vx.tags.count(n.jobid) > 0;
    if (k == "agfilter") return x == "true" || x == "t";
    if (k == "names") return n.names.count(std::string(vx.name)) > 0;
    if (k == "property") return vx.properties.count(x) > 0;
    return false;
}

struct Walk {
    const Graph &g;
    const FindCriteria &c;
    Emission &out;
    // Vertices already walked, when some have several parents (else empty).
    std::vector<char> seen;

    // Returns how many vertices of u's subtree were emitted (u included).
    int64_t visit(int u, FindCriteria::Inherited in, int level) {
        if (!seen.empty()) {
            if (seen[static_cast<size_t>(u)]) return 0;
            seen[static_cast<size_t>(u)] = 1;
        }
        const Vertex &vx = g.vertices[static_cast<size_t>(u)];
        in.down = in.down || vx.status == Status::Down;
        in.allocated = in.allocated || !vx.allocations.empty();
        in.reserved = in.reserved || !vx.reservations.empty();
        int64_t nchildren = 0;
        for (int e : vx.out_edges) {
            const Edge &ed = g.edges[static_cast<size_t>(e)];
            if (ed.removed || g.vertices[static_cast<size_t>(ed.target)].removed) continue;
            int64_t n = visit(ed.target, in, level + 1);
            if (n > 0) {
                out.edges.push_back(e);
                nchildren += n;
            }
        }
        if (!c.eval(g, u, in) && nchildren == 0) return 0;
        if (c.agfilter()) {
            // Only vertices that carry an aggregate filter are reported.
            if (!vx.subplan) return 0;
            const PlannerMulti &pm = *vx.subplan;
            std::map<std::string, std::string> usage;
            int64_t span = -1;
            if (c.jobid() != 0) {
                auto it = vx.job2span.find(c.jobid());
                if (it == vx.job2span.end()) return 0;
                span = it->second;
            }
            for (size_t i = 0; i < pm.size(); ++i) {
                int64_t total = pm.at(i).total();
                int64_t used;
                if (span >= 0) {
                    used = pm.span_planned(span, i);
                } else {
                    // Time 0 is "now" on this matcher's time line.
                    int64_t free_now = pm.at(i).avail_at(0);
                    used = total - (free_now < 0 ? total : free_now);
                }
                usage[g.types.name(pm.type_at(i))] =
                    "used:" + std::to_string(used) + ", total:" + std::to_string(total);
            }
            out.agfilter[u] = std::move(usage);
        }
        out.vertices.push_back({u, vx.size, true, level});
        return nchildren + 1;
    }
};

}  // namespace

FindCriteria FindCriteria::parse(const std::string &text) {
    Parser p{text};
    FindCriteria c;
    c.root_ = p.expr(0, text.size());
    c.agfilter_ = p.agfilter;
    c.jobid_ = p.jobid;
    return c;
}

bool FindCriteria::eval(const Graph &g, int v, const Inherited &in) const { return eval_node(*root_, g, v, in); }

Emission find_vertices(const Graph &g, const FindCriteria &c) {
    Emission em;
    if (g.root < 0) return em;
    Walk w{g, c, em, {}};
    if (g.has_shared_children()) w.seen.assign(g.vertices.size(), 0);
    w.visit(g.root, {}, 1);
    return em;
}

}  // namespace fluxion
