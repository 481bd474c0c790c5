#include "readers/rv1exec.hpp"

#include <algorithm>
#include <cctype>

#include "graph/graph.hpp"
#include "jobspec/jobspec.hpp"
#include "util/errors.hpp"
#include "util/json.hpp"

namespace fluxion {

namespace {

// The execution object of a version 1 R, with its R_lite array.
const json::Value &execution_of(const json::Value &doc) {
    if (!doc.is_object()) throw InputError("R: the document must be an object");
    const json::Value *version = doc.find("version");
    if (!version || !version->is_int() || version->as_int() != 1) throw InputError("R: 'version' must be 1");
    const json::Value *exec = doc.find("execution");
    if (!exec || !exec->is_object()) throw InputError("R: no 'execution' object in it");
    const json::Value *rlite = exec->find("R_lite");
    if (!rlite || !rlite->is_array()) throw InputError("R: no 'execution.R_lite' array in it");
    return *exec;
}

// The id a host name gives its node: the number its name ends with (-1 when
// it ends with no digit).
int64_t host_number(const std::string &host) {
    size_t digits = host.size();
    while (digits > 0 && std::isdigit(static_cast<unsigned char>(host[digits - 1]))) --digits;
    if (digits == host.size()) return -1;
    std::string number = host.substr(digits);
    size_t nz = number.find_first_not_of('0');
    if (nz == std::string::npos) return 0;
    // 18 significant digits always fit an int64.
    if (number.size() - nz > 18) throw InputError("R: host '" + host + "' ends with a number too large for an id");
    return std::stoll(number.substr(nz));
}

// The vertex R places at `path`, checked against what R says of it.
int named_vertex(const Graph &g, const std::string &path, const std::string &type, int64_t rank, int64_t id,
                 int parent) {
    int v = g.find_path(path);
    const Vertex *x = v < 0 ? nullptr : &g.vertices[static_cast<size_t>(v)];
    if (!x || x->path != path)
        throw NotFoundError("R: rank " + std::to_string(rank) + " names " + type + " " + path +
                            ", which is not in the graph");
    const std::string at = "R: the vertex at " + path;
    if (g.types.name(x->type) != type)
        throw InputError(at + " is a " + g.types.name(x->type) + ", R names a " + type + " there");
    if (x->rank != rank)
        throw InputError(at + " has rank " + std::to_string(x->rank) + ", R gives it rank " + std::to_string(rank));
    if (x->id != id)
        throw InputError(at + " has id " + std::to_string(x->id) + ", R names id " + std::to_string(id));
    if (x->size != 1)
        throw InputError(at + " is a pool of " + std::to_string(x->size) +
                         " units; an rv1exec R names single resources only");
    bool child = g.parent(v) == parent;
    for (size_t i = 0; !child && i < g.vertices[static_cast<size_t>(parent)].out_edges.size(); ++i) {
        int e = g.vertices[static_cast<size_t>(parent)].out_edges[i];
        child = g.edges[static_cast<size_t>(e)].target == v;
    }
    if (!child) throw InputError(at + " is not a child of " + std::string(g.vertices[static_cast<size_t>(parent)].path));
    return v;
}

}  // namespace

std::set<int64_t> r_lite_ranks(const std::string &R) {
    json::Value doc = json::parse(R);
    const json::Value &exec = execution_of(doc);
    std::set<int64_t> ranks;
    for (const auto &entry : exec.find("R_lite")->items()) {
        const json::Value *rank = entry.is_object() ? entry.find("rank") : nullptr;
        if (!rank || !rank->is_string()) throw InputError("R: every R_lite entry needs a 'rank' idset string");
        std::set<int64_t> ids = parse_idset(rank->as_string());
        ranks.insert(ids.begin(), ids.end());
    }
    return ranks;
}

std::vector<Rv1Rank> read_rv1exec(const std::string &R) {
    json::Value doc = json::parse(R);
    const json::Value &exec = execution_of(doc);
    const json::Value *nodelist = exec.find("nodelist");
    if (!nodelist || !nodelist->is_array()) throw InputError("R: no 'execution.nodelist' array in it");
    std::vector<std::string> hosts;
    for (const auto &h : nodelist->items()) {
        if (!h.is_string()) throw InputError("R: every nodelist entry must be a hostlist string");
        for (auto &name : expand_hostlist(h.as_string())) hosts.push_back(std::move(name));
    }
    // Properties name ranks too; they are not needed here but must be readable.
    if (const json::Value *props = exec.find("properties"); props && props->is_object())
        for (const auto &kv : props->members()) {
            if (!kv.second.is_string())
                throw InputError("R: property '" + kv.first + "' must map to an idset string of ranks");
            parse_idset(kv.second.as_string());
        }
    std::map<int64_t, Rv1Rank> by_rank;
    for (const auto &entry : exec.find("R_lite")->items()) {
        const json::Value *rank = entry.is_object() ? entry.find("rank") : nullptr;
        const json::Value *children = entry.is_object() ? entry.find("children") : nullptr;
        if (!rank || !rank->is_string()) throw InputError("R: every R_lite entry needs a 'rank' idset string");
        if (!children || !children->is_object()) throw InputError("R: every R_lite entry needs a 'children' object");
        std::vector<std::pair<std::string, std::set<int64_t>>> kids;
        for (const auto &kv : children->members()) {
            if (!kv.second.is_string())
                throw InputError("R: the ids of child type '" + kv.first + "' must be an idset string");
            kids.emplace_back(kv.first, parse_idset(kv.second.as_string()));
        }
        for (int64_t r : parse_idset(rank->as_string())) {
            Rv1Rank &out = by_rank[r];
            out.rank = r;
            out.children.insert(out.children.end(), kids.begin(), kids.end());
        }
    }
    // The nodelist holds one host per rank, in increasing rank order.
    std::vector<Rv1Rank> ranks;
    ranks.reserve(by_rank.size());
    for (auto &kv : by_rank) {
        if (ranks.size() >= hosts.size())
            throw InputError("R: R_lite lists " + std::to_string(by_rank.size()) + " ranks, the nodelist only " +
                             std::to_string(hosts.size()) + " hosts");
        kv.second.host = hosts[ranks.size()];
        ranks.push_back(std::move(kv.second));
    }
    return ranks;
}

Rv1Holdings rv1exec_holdings(const Graph &g, const std::string &R) {
    std::vector<Rv1Rank> ranks = read_rv1exec(R);
    if (g.subsystem() != "containment")
        throw InputError("R: an rv1exec R names containment vertices; this graph is matched on " + g.subsystem());
    if (g.root < 0) throw NotFoundError("R: the graph has no root");
    const Vertex &root = g.vertices[static_cast<size_t>(g.root)];
    Rv1Holdings h;
    h.amounts[g.root] = {root.size, false};
    // A node's own planner is only spanned when R names every other vertex
    // of its rank: count them, for the ranks R lists.
    std::map<int64_t, int64_t> of_rank;
    for (const auto &r : ranks) of_rank[r.rank] = 0;
    for (const auto &v : g.vertices)
        if (!v.removed)
            if (auto it = of_rank.find(v.rank); it != of_rank.end()) ++it->second;
    const std::string node_type = g.types.name(g.types.node);
    for (const auto &r : ranks) {
        std::string node_path = std::string(root.path) + "/" + r.host;
        int node = named_vertex(g, node_path, node_type, r.rank, host_number(r.host), g.root);
        h.amounts[node] = {1, true};
        int64_t named = 0;
        for (const auto &[type, ids] : r.children)
            for (int64_t id : ids) {
                std::string path = node_path + "/" + type + std::to_string(id);
                int v = named_vertex(g, path, type, r.rank, id, node);
                if (!h.amounts.emplace(v, std::make_pair(int64_t{1}, true)).second)
                    throw InputError("R: " + path + " is named twice");
                ++named;
            }
        if (named != of_rank[r.rank] - 1) h.unplanned.push_back(node);
    }
    return h;
}

}  // namespace fluxion
