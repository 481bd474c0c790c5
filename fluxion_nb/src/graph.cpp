#include "graph.hpp"

#include <algorithm>
#include <cctype>
#include <unordered_set>

#include "errors.hpp"
#include "json.hpp"

namespace fluxion {

TypeTable::TypeTable() {
    // The order flux-sched interns its built-in type names; it decides how
    // ties between types are ordered, so keep it.
    cluster = intern("cluster");
    core = intern("core");
    socket = intern("socket");
    gpu = intern("gpu");
    node = intern("node");
    rack = intern("rack");
    slot = intern("slot");
    intern("xor_slot");
    intern("ssd");
    storage_node = intern("storage_node");
}

int TypeTable::intern(const std::string &n) {
    auto it = ids_.find(n);
    if (it != ids_.end()) return it->second;
    int id = static_cast<int>(names_.size());
    names_.push_back(n);
    ids_.emplace(n, id);
    return id;
}

int TypeTable::find(const std::string &n) const {
    auto it = ids_.find(n);
    return it == ids_.end() ? -1 : it->second;
}

Graph::Graph(GraphOptions opts) : opts_(std::move(opts)) {}

int Graph::find_path(const std::string &path) const {
    auto it = by_path.find(path);
    if (it == by_path.end()) return -1;
    return vertices[static_cast<size_t>(it->second)].removed ? -1 : it->second;
}

void Graph::subtree(int v, std::vector<int> &out) const {
    out.push_back(v);
    for (int e : vertices[static_cast<size_t>(v)].out_edges)
        subtree(edges[static_cast<size_t>(e)].target, out);
}

namespace {

const json::Value &require(const json::Value &obj, const char *key, const std::string &where) {
    const json::Value *v = obj.find(key);
    if (!v) throw InputError(where + ": required key '" + key + "' is missing");
    return *v;
}

std::string outer_id(const json::Value &v, const char *what, size_t i) {
    if (v.is_string()) return v.as_string();
    if (v.is_int()) return std::to_string(v.as_int());
    throw InputError(std::string("JGF ") + what + " " + std::to_string(i) +
                     ": 'id' must be a string");
}

int64_t opt_int(const json::Value &md, const char *key, int64_t dflt, const std::string &where) {
    const json::Value *v = md.find(key);
    if (!v || v->is_null()) return dflt;
    if (!v->is_int()) throw InputError(where + ": metadata." + key + " must be an integer");
    return v->as_int();
}

const std::string *opt_str(const json::Value &md, const char *key, const std::string &where) {
    const json::Value *v = md.find(key);
    if (!v || v->is_null()) return nullptr;
    if (!v->is_string()) throw InputError(where + ": metadata." + key + " must be a string");
    return &v->as_string();
}

bool partial_for(const GraphOptions &o, const std::string &type) {
    return o.partial_pool_types.count("*") || o.partial_pool_types.count(type);
}

}  // namespace

void Graph::index_vertex(int v) {
    Vertex &x = vertices[static_cast<size_t>(v)];
    by_path[x.path] = v;
    by_name[x.name].push_back(v);
    by_rank[x.rank].push_back(v);
    if (by_type.size() <= static_cast<size_t>(x.type)) by_type.resize(static_cast<size_t>(x.type) + 1);
    by_type[static_cast<size_t>(x.type)].push_back(v);
    if (x.type == types.node && x.status == Status::Up) nodes_up++;
}

void Graph::unindex_vertex(int v) {
    Vertex &x = vertices[static_cast<size_t>(v)];
    by_path.erase(x.path);
    auto erase_from = [v](std::vector<int> &vec) {
        vec.erase(std::remove(vec.begin(), vec.end(), v), vec.end());
    };
    erase_from(by_name[x.name]);
    erase_from(by_rank[x.rank]);
    erase_from(by_type[static_cast<size_t>(x.type)]);
    if (x.type == types.node && x.status == Status::Up) nodes_up--;
}

void Graph::resort_outedge(int v, int e) {
    auto &vec = vertices[static_cast<size_t>(v)].by_outedges;
    auto key = [this](int edge) {
        const Edge &ed = edges[static_cast<size_t>(edge)];
        return std::make_pair(ed.weight, vertices[static_cast<size_t>(ed.target)].uniq_id);
    };
    auto it = std::find(vec.begin(), vec.end(), e);
    if (it != vec.end()) vec.erase(it);
    auto k = key(e);
    auto pos = std::lower_bound(vec.begin(), vec.end(), k,
                                [&](int a, const std::pair<uint64_t, int64_t> &kk) {
                                    return key(a) > kk;
                                });
    vec.insert(pos, e);
}

void Graph::add_edge(int src, int tgt, const std::string &subsystem) {
    if (subsystem != "containment") {
        // Only the containment subsystem is matched on; other subsystems are
        // recorded on the vertex paths but their edges are not walked.
        return;
    }
    Vertex &t = vertices[static_cast<size_t>(tgt)];
    if (t.parent_edge >= 0)
        throw InputError("JGF edge " + vertices[static_cast<size_t>(src)].name + " -> " + t.name +
                         ": vertex already has a containment parent");
    int e = static_cast<int>(edges.size());
    Edge ed;
    ed.source = src;
    ed.target = tgt;
    edges.push_back(ed);
    t.parent_edge = e;
    vertices[static_cast<size_t>(src)].out_edges.push_back(e);
    resort_outedge(src, e);
}

std::vector<int> Graph::read_jgf(const std::string &text, bool attach) {
    json::Value doc = json::parse(text);
    if (!doc.is_object()) throw InputError("JGF: the document must be an object");
    const json::Value &g = require(doc, "graph", "JGF");
    if (!g.is_object()) throw InputError("JGF: 'graph' must be an object");
    const json::Value &nodes = require(g, "nodes", "JGF graph");
    const json::Value *edges_v = g.find("edges");
    if (!nodes.is_array()) throw InputError("JGF: 'graph.nodes' must be an array");
    if (edges_v && !edges_v->is_array()) throw InputError("JGF: 'graph.edges' must be an array");
    if (!edges_v && !attach) throw InputError("JGF graph: required key 'edges' is missing");

    // Validate everything before touching the graph, so bad input changes nothing.
    struct Pending {
        std::string key;
        Vertex v;
        std::string type_name;
        bool existing = false;
    };
    std::vector<Pending> pend;
    pend.reserve(nodes.items().size());
    std::unordered_map<std::string, size_t> new_keys;
    std::unordered_set<std::string> new_paths;
    size_t i = 0;
    for (const auto &n : nodes.items()) {
        std::string where = "JGF node " + std::to_string(i);
        if (!n.is_object()) throw InputError(where + ": must be an object");
        Pending p;
        p.key = outer_id(require(n, "id", where), "node", i);
        where = "JGF node '" + p.key + "'";
        const json::Value &md = require(n, "metadata", where);
        if (!md.is_object()) throw InputError(where + ": 'metadata' must be an object");
        const std::string *type = opt_str(md, "type", where);
        if (!type) throw InputError(where + ": required key 'metadata.type' is missing");
        if (type->empty()) throw InputError(where + ": metadata.type is empty");
        p.type_name = *type;
        const json::Value &paths = require(md, "paths", where + " metadata");
        if (!paths.is_object()) throw InputError(where + ": metadata.paths must be an object");
        Vertex &v = p.v;
        v.uniq_id = opt_int(md, "uniq_id", -1, where);
        if (v.uniq_id == -1) {
            try {
                size_t used = 0;
                v.uniq_id = std::stoll(p.key, &used);
            } catch (...) {
                throw InputError(where + ": uniq_id cannot be inferred from the outer id");
            }
        }
        const std::string *name = opt_str(md, "name", where);
        v.id = opt_int(md, "id", -2, where);
        if (v.id == -2) {
            v.id = v.uniq_id;
            if (*type == "node" && name) {
                size_t k = name->size();
                while (k > 0 && std::isdigit(static_cast<unsigned char>((*name)[k - 1]))) --k;
                if (k < name->size()) {
                    try {
                        v.id = std::stoll(name->substr(k));
                    } catch (...) {
                        throw InputError(where + ": cannot read an id from name " + *name);
                    }
                }
            }
        }
        v.rank = opt_int(md, "rank", -1, where);
        int64_t st = opt_int(md, "status", 0, where);
        if (st != 0 && st != 1) throw InputError(where + ": metadata.status must be 0 (up) or 1 (down)");
        v.status = st == 0 ? Status::Up : Status::Down;
        if (const json::Value *ex = md.find("exclusive"); ex && !ex->is_null() && !ex->is_bool())
            throw InputError(where + ": metadata.exclusive must be a boolean");
        v.size = opt_int(md, "size", 1, where);
        if (v.size < 0) throw InputError(where + ": metadata.size must not be negative");
        const std::string *basename = opt_str(md, "basename", where);
        v.basename = basename ? *basename : *type;
        v.name = name ? *name : v.basename + std::to_string(v.id);
        const std::string *unit = opt_str(md, "unit", where);
        v.unit = unit ? *unit : "";
        for (const auto &kv : paths.members()) {
            if (!kv.second.is_string())
                throw InputError(where + ": metadata.paths." + kv.first + " must be a string");
            if (kv.first == "containment")
                v.path = kv.second.as_string();
            else
                v.other_paths[kv.first] = kv.second.as_string();
        }
        if (v.path.empty())
            throw InputError(where + ": metadata.paths has no 'containment' path");
        if (const json::Value *props = md.find("properties"); props && !props->is_null()) {
            if (!props->is_object())
                throw InputError(where + ": metadata.properties must be an object or null");
            for (const auto &kv : props->members()) {
                if (!kv.second.is_string())
                    throw InputError(where + ": property '" + kv.first + "' must be a string");
                v.properties[kv.first] = kv.second.as_string();
            }
        }
        if (new_keys.count(p.key)) throw InputError(where + ": duplicate vertex id");
        if (attach && key_to_vertex_.count(p.key)) {
            // Attaching a subgraph that names existing vertices (the path
            // from the root down to the attach point) is allowed.
            int ex = key_to_vertex_.at(p.key);
            if (vertices[static_cast<size_t>(ex)].path != v.path)
                throw InputError(where + ": id already used by another vertex");
            p.existing = true;
        } else {
            if (!attach && key_to_vertex_.count(p.key)) throw InputError(where + ": duplicate vertex id");
            if (find_path(v.path) >= 0 || new_paths.count(v.path))
                throw InputError(where + ": duplicate containment path " + v.path);
            new_paths.insert(v.path);
        }
        new_keys.emplace(p.key, pend.size());
        pend.push_back(std::move(p));
        ++i;
    }
    // Roots: a containment path with a single '/'.
    int roots = 0;
    for (const auto &p : pend)
        if (!p.existing && std::count(p.v.path.begin(), p.v.path.end(), '/') == 1) ++roots;
    if (!attach && roots != 1)
        throw InputError(roots == 0 ? "JGF: no containment root (a vertex whose path is '/<name>')"
                                    : "JGF: more than one containment root");
    if (attach && (roots > 0 && root >= 0))
        throw InputError("JGF: an attached subgraph cannot add a second root");

    struct PendingEdge {
        std::string src, tgt, subsystem;
    };
    std::vector<PendingEdge> pedges;
    std::unordered_map<std::string, int> parents_seen;
    if (edges_v) {
        size_t j = 0;
        for (const auto &e : edges_v->items()) {
            std::string where = "JGF edge " + std::to_string(j++);
            if (!e.is_object()) throw InputError(where + ": must be an object");
            PendingEdge pe;
            const json::Value &s = require(e, "source", where);
            const json::Value &t = require(e, "target", where);
            pe.src = s.is_string() ? s.as_string() : s.is_int() ? std::to_string(s.as_int()) : "";
            pe.tgt = t.is_string() ? t.as_string() : t.is_int() ? std::to_string(t.as_int()) : "";
            if (pe.src.empty() || pe.tgt.empty())
                throw InputError(where + ": source and target must be vertex id strings");
            pe.subsystem = "containment";
            if (const json::Value *md = e.find("metadata"); md && md->is_object())
                if (const json::Value *ss = md->find("subsystem"); ss && ss->is_string())
                    pe.subsystem = ss->as_string();
            bool src_known = new_keys.count(pe.src) || key_to_vertex_.count(pe.src);
            bool tgt_known = new_keys.count(pe.tgt) || key_to_vertex_.count(pe.tgt);
            if (!src_known) throw InputError(where + ": unknown source vertex '" + pe.src + "'");
            if (!tgt_known) throw InputError(where + ": unknown target vertex '" + pe.tgt + "'");
            if (pe.subsystem == "containment") {
                auto it = new_keys.find(pe.tgt);
                bool tgt_new = it != new_keys.end() && !pend[it->second].existing;
                if (tgt_new && parents_seen[pe.tgt]++ > 0)
                    throw InputError(where + ": vertex '" + pe.tgt + "' has two containment parents");
                if (pe.src == pe.tgt) throw InputError(where + ": an edge cannot loop on one vertex");
            }
            pedges.push_back(std::move(pe));
        }
    }
    for (const auto &p : pend) {
        if (p.existing) continue;
        bool is_root = std::count(p.v.path.begin(), p.v.path.end(), '/') == 1;
        if (!is_root && !parents_seen.count(p.key))
            throw InputError("JGF node '" + p.key + "': no containment edge reaches it (path " +
                             p.v.path + ")");
    }

    // Commit.
    std::vector<int> added;
    const int first_new = static_cast<int>(vertices.size());
    std::unordered_map<std::string, int> local;
    for (auto &p : pend) {
        if (p.existing) {
            local[p.key] = key_to_vertex_.at(p.key);
            continue;
        }
        int idx = static_cast<int>(vertices.size());
        p.v.type = types.intern(p.type_name);
        p.v.partial_pool = partial_for(opts_, p.type_name);
        p.v.plans = Planner(start(), duration(), p.v.size);
        p.v.x_checker = Planner(start(), duration(), kXCheckerJobs);
        vertices.push_back(std::move(p.v));
        key_to_vertex_[p.key] = idx;
        vertex_key_.push_back(p.key);
        local[p.key] = idx;
        index_vertex(idx);
        added.push_back(idx);
        if (std::count(vertices.back().path.begin(), vertices.back().path.end(), '/') == 1) root = idx;
    }
    for (const auto &pe : pedges) {
        auto ls = local.find(pe.src);
        auto lt = local.find(pe.tgt);
        int s = ls != local.end() ? ls->second : key_to_vertex_.at(pe.src);
        int t = lt != local.end() ? lt->second : key_to_vertex_.at(pe.tgt);
        // New vertices were appended, so they are exactly the indices from first_new on.
        bool touches_new = s >= first_new || t >= first_new;
        if (attach && !touches_new) continue;
        add_edge(s, t, pe.subsystem);
    }
    return added;
}

void Graph::load_jgf(const std::string &text) {
    if (!vertices.empty()) throw StateError("graph already loaded");
    read_jgf(text, false);
}

std::vector<int> Graph::attach_jgf(const std::string &text) {
    if (vertices.empty()) {
        read_jgf(text, false);
        std::vector<int> all(vertices.size());
        for (size_t k = 0; k < all.size(); ++k) all[k] = static_cast<int>(k);
        return all;
    }
    return read_jgf(text, true);
}

std::vector<int> Graph::detach_subtree(int v) {
    std::vector<int> sub;
    subtree(v, sub);
    int pe = vertices[static_cast<size_t>(v)].parent_edge;
    if (pe >= 0) {
        Edge &e = edges[static_cast<size_t>(pe)];
        Vertex &par = vertices[static_cast<size_t>(e.source)];
        par.out_edges.erase(std::remove(par.out_edges.begin(), par.out_edges.end(), pe),
                            par.out_edges.end());
        par.by_outedges.erase(std::remove(par.by_outedges.begin(), par.by_outedges.end(), pe),
                              par.by_outedges.end());
        e.removed = true;
    }
    for (int x : sub) {
        unindex_vertex(x);
        key_to_vertex_.erase(vertex_key_[static_cast<size_t>(x)]);
        vertices[static_cast<size_t>(x)].removed = true;
        for (int e : vertices[static_cast<size_t>(x)].out_edges) edges[static_cast<size_t>(e)].removed = true;
    }
    if (v == root) root = -1;
    return sub;
}

void Graph::set_status(int v, Status s) {
    Vertex &x = vertices[static_cast<size_t>(v)];
    if (x.status == s) return;
    if (x.type == types.node) nodes_up += (s == Status::Up) ? 1 : -1;
    x.status = s;
}

}  // namespace fluxion
