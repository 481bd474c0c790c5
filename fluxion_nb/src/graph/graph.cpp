#include "graph/graph.hpp"

#include <algorithm>
#include <cctype>
#include <map>
#include <set>
#include <utility>
#include <string_view>
#include <unordered_set>

#include "util/errors.hpp"
#include "readers/jgf.hpp"

namespace fluxion {

void reserve_scheduling_state(size_t vertices) {
    Planner::reserve_states(2 * vertices);  // plans and x_checker
    FlatMap<int64_t, int64_t>::reserve_first_blocks(2 * vertices);  // allocations and x_spans
    FlatSet<int64_t>::reserve_first_blocks(vertices);               // tags
}

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
    xor_slot = intern("xor_slot");
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

int Graph::find_path(std::string_view path) const {
    int v = by_path.find(path);
    if (v < 0) {
        auto it = other_path_index_.find(path);
        if (it == other_path_index_.end()) return -1;
        v = it->second;
    }
    return vertices[static_cast<size_t>(v)].removed ? -1 : v;
}

std::string_view Graph::path_in(int v, const std::string &ss) const {
    const Vertex &x = vertices[static_cast<size_t>(v)];
    if (ss == "containment") return x.path;
    auto it = x.other_paths.find(ss);
    return it == x.other_paths.end() ? std::string_view() : std::string_view(it->second);
}

std::string_view Graph::some_path(int v) const {
    if (std::string_view p = path_in(v, opts_.subsystem); !p.empty()) return p;
    const Vertex &x = vertices[static_cast<size_t>(v)];
    if (!x.path.empty() || x.other_paths.empty()) return x.path;
    return x.other_paths.begin()->second;
}

void Graph::subtree(int v, std::vector<int> &out) const {
    if (!shared_children_) {
        out.push_back(v);
        for (int e : vertices[static_cast<size_t>(v)].out_edges)
            subtree(edges[static_cast<size_t>(e)].target, out);
        return;
    }
    // A vertex with several containment parents is listed once.
    std::vector<char> seen(vertices.size(), 0);
    std::vector<int> stack{v};
    while (!stack.empty()) {
        int x = stack.back();
        stack.pop_back();
        if (seen[static_cast<size_t>(x)]) continue;
        seen[static_cast<size_t>(x)] = 1;
        out.push_back(x);
        const auto &oe = vertices[static_cast<size_t>(x)].out_edges;
        for (auto it = oe.rbegin(); it != oe.rend(); ++it) stack.push_back(edges[static_cast<size_t>(*it)].target);
    }
}

void Graph::index_vertex(int v) {
    Vertex &x = vertices[static_cast<size_t>(v)];
    if (by_type.size() <= static_cast<size_t>(x.type)) by_type.resize(static_cast<size_t>(x.type) + 1);
    by_type[static_cast<size_t>(x.type)].push_back(v);
    if (x.type == types.node && x.status == Status::Up) nodes_up++;
}

void Graph::unindex_vertex(int v) {
    Vertex &x = vertices[static_cast<size_t>(v)];
    if (!x.path.empty()) by_path.erase(x.path);
    for (const auto &kv : x.other_paths) other_path_index_.erase(kv.second);
    auto erase_from = [v](std::vector<int> &vec) {
        vec.erase(std::remove(vec.begin(), vec.end(), v), vec.end());
    };
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

void Graph::add_edge(int src, int tgt) {
    Vertex &t = vertices[static_cast<size_t>(tgt)];
    int e = static_cast<int>(edges.size());
    Edge ed;
    ed.source = src;
    ed.target = tgt;
    edges.push_back(ed);
    // The first containment edge stays the vertex's parent (as Fluxion's
    // first in-edge); later ones make it shared by several parents.
    if (t.parent_edge < 0)
        t.parent_edge = e;
    else
        shared_children_ = true;
    vertices[static_cast<size_t>(src)].out_edges.push_back(e);
    resort_outedge(src, e);
}

void Graph::load_jgf(std::string_view text) {
    if (!vertices.empty()) throw StateError("graph already loaded");
    JgfReader(*this, text, false).read();
}

std::vector<int> Graph::attach_jgf(std::string_view text) {
    if (vertices.empty()) {
        JgfReader(*this, text, false).read();
        std::vector<int> all(vertices.size());
        for (size_t k = 0; k < all.size(); ++k) all[k] = static_cast<int>(k);
        return all;
    }
    return JgfReader(*this, text, true).read();
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
    if (shared_children_) {
        // A removed vertex may also hang under a parent that stays.
        for (size_t k = 0; k < edges.size(); ++k) {
            Edge &e = edges[k];
            if (e.removed || !vertices[static_cast<size_t>(e.target)].removed) continue;
            Vertex &par = vertices[static_cast<size_t>(e.source)];
            int ei = static_cast<int>(k);
            par.out_edges.erase(std::remove(par.out_edges.begin(), par.out_edges.end(), ei), par.out_edges.end());
            par.by_outedges.erase(std::remove(par.by_outedges.begin(), par.by_outedges.end(), ei),
                                  par.by_outedges.end());
            e.removed = true;
        }
    }
    if (v == root) root = -1;
    return sub;
}

void Graph::set_status(int v, Status s) {
    Vertex &x = vertices[static_cast<size_t>(v)];
    if (x.status == s) return;
    x.status = s;
    // As Fluxion marks a path: the vertex alone changes (matching does not descend
    // below a vertex that is down), while every node under it counts as up or down.
    std::vector<int> sub;
    subtree(v, sub);
    for (int u : sub) {
        const Vertex &y = vertices[static_cast<size_t>(u)];
        if (y.type == types.node) nodes_up += (s == Status::Up) ? y.size : -y.size;
    }
}

}  // namespace fluxion
