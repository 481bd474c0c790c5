#include "graph.hpp"

#include <algorithm>
#include <cctype>
#include <map>
#include <set>
#include <utility>
#include <string_view>
#include <unordered_set>

#include "errors.hpp"
#include "json.hpp"

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

namespace {

// Names the JGF element being read in an error message; the text is only
// built when there is an error to report.
struct Where {
    const char *what;  // "node" or "edge"
    size_t i;
    std::string_view key;  // the node's id once known
    bool keyed = false;
    std::string str() const {
        if (keyed) return std::string("JGF ") + what + " '" + std::string(key) + "'";
        return std::string("JGF ") + what + " " + std::to_string(i);
    }
};

const json::Node &require(const json::Node &obj, const char *key, const std::string &where) {
    const json::Node *v = obj.find(key);
    if (!v) throw InputError(where + ": required key '" + key + "' is missing");
    return *v;
}

const json::Node &require(const json::Node &obj, const char *key, const Where &where) {
    const json::Node *v = obj.find(key);
    if (!v) throw InputError(where.str() + ": required key '" + key + "' is missing");
    return *v;
}

// Integer ids are written back as decimal text, kept in `scratch`.
std::string_view outer_id(const json::Node &v, const char *what, size_t i, StringPool &scratch) {
    if (v.is_string()) return v.str();
    if (v.is_int()) return scratch.add(std::to_string(v.as_int()));
    throw InputError(std::string("JGF ") + what + " " + std::to_string(i) +
                     ": 'id' must be a string");
}

int64_t opt_int(const json::Node *v, const char *key, int64_t dflt, const Where &where) {
    if (!v || v->is_null()) return dflt;
    if (!v->is_int()) throw InputError(where.str() + ": metadata." + key + " must be an integer");
    return v->as_int();
}

const json::Node *opt_str(const json::Node *v, const char *key, const Where &where) {
    if (!v || v->is_null()) return nullptr;
    if (!v->is_string()) throw InputError(where.str() + ": metadata." + key + " must be a string");
    return v;
}

// The metadata members a vertex is built from, found in one pass over the
// object (the first of repeated keys wins, as with find()).
struct Metadata {
    const json::Node *type = nullptr, *paths = nullptr, *uniq_id = nullptr, *name = nullptr,
                     *id = nullptr, *rank = nullptr, *status = nullptr, *exclusive = nullptr,
                     *size = nullptr, *basename = nullptr, *unit = nullptr, *properties = nullptr;

    explicit Metadata(const json::Node &md) {
        for (uint32_t k = 0; k < md.n; ++k) {
            const json::Member &m = md.members[k];
            const json::Node **slot = slot_for(m.key);
            if (slot && !*slot) *slot = &m.value;
        }
    }

   private:
    const json::Node **slot_for(std::string_view key) {
        switch (key.size()) {
            case 2:
                return key == "id" ? &id : nullptr;
            case 4:
                if (key == "type") return &type;
                if (key == "name") return &name;
                if (key == "rank") return &rank;
                if (key == "size") return &size;
                if (key == "unit") return &unit;
                return nullptr;
            case 5:
                return key == "paths" ? &paths : nullptr;
            case 6:
                return key == "status" ? &status : nullptr;
            case 7:
                return key == "uniq_id" ? &uniq_id : nullptr;
            case 8:
                return key == "basename" ? &basename : nullptr;
            case 9:
                return key == "exclusive" ? &exclusive : nullptr;
            case 10:
                return key == "properties" ? &properties : nullptr;
            default:
                return nullptr;
        }
    }
};

// Exactly one '/': the scan stops at the second, which most paths reach soon.
bool is_root_path(std::string_view path) {
    size_t first = path.find('/');
    return first != std::string_view::npos && path.find('/', first + 1) == std::string_view::npos;
}

// Vertex ids that are small decimal numbers ("0", "17"), as flux-sched and
// the Kubernetes graph write them, find their pending vertex through an
// array; a hash lookup of a key in a large graph costs several cache
// misses, an edge two lookups. Whether a key has a slot depends on the key
// alone, so a key without one is simply not a numbered id.
class NumberedIds {
   public:
    explicit NumberedIds(size_t capacity) : at_(capacity, -1) {}
    // The slot of a canonical decimal id below the capacity, else null.
    int *slot(std::string_view key) {
        if (key.empty() || key.size() > 9 || (key[0] == '0' && key.size() > 1)) return nullptr;
        size_t n = 0;
        for (char c : key) {
            if (c < '0' || c > '9') return nullptr;
            n = n * 10 + static_cast<size_t>(c - '0');
        }
        return n < at_.size() ? &at_[n] : nullptr;
    }

   private:
    std::vector<int> at_;
};

}  // namespace

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

void Graph::reject_shared_cycles(const std::vector<std::pair<int, int>> &pedges, int first_new) const {
    // Every new vertex reaches the root by its first parents; with more
    // parents a loop can still close through the others. Colour depth-first
    // over the new vertices: reaching one still on the path is a loop.
    size_t n = vertices.size() - static_cast<size_t>(first_new);
    std::vector<std::vector<int>> kids(n);
    for (const auto &pe : pedges)
        if (pe.first >= first_new && pe.second >= first_new)
            kids[static_cast<size_t>(pe.first - first_new)].push_back(pe.second - first_new);
    enum : char { kWhite = 0, kGray = 1, kBlack = 2 };
    std::vector<char> color(n, kWhite);
    std::vector<std::pair<int, size_t>> stack;  // vertex, next child index
    for (size_t s = 0; s < n; ++s) {
        if (color[s] != kWhite) continue;
        stack.push_back({static_cast<int>(s), 0});
        color[s] = kGray;
        while (!stack.empty()) {
            auto &[x, i] = stack.back();
            const auto &ks = kids[static_cast<size_t>(x)];
            if (i == ks.size()) {
                color[static_cast<size_t>(x)] = kBlack;
                stack.pop_back();
                continue;
            }
            int k = ks[i++];
            if (color[static_cast<size_t>(k)] == kGray)
                throw InputError("JGF: vertex at path " +
                                 std::string(vertices[static_cast<size_t>(k + first_new)].path) +
                                 " is in a containment cycle; containment edges must not loop");
            if (color[static_cast<size_t>(k)] == kWhite) {
                color[static_cast<size_t>(k)] = kGray;
                stack.push_back({k, 0});
            }
        }
    }
}

std::vector<int> Graph::read_jgf(std::string_view text, bool attach) {
    // Validate everything before touching the graph, so bad input changes
    // nothing. New vertices are built at the end of `vertices` but indexed
    // nowhere, and dropped again if the input turns out bad; their strings
    // point into the parsed text until the commit moves them to the pool.
    struct Pending {
        std::string_view key;
        std::string_view type_name;
        int vertex;  // existing vertex, or index the new one will get
        bool existing = false;
        bool root = false;    // root of the dominant subsystem
        bool in_dom = false;  // has a path in the dominant subsystem
        int parents = 0;      // dominant edges reaching a new vertex
    };
    const std::string &dom = opts_.subsystem;
    StringPool scratch;
    const int first_new = static_cast<int>(vertices.size());
    struct Rollback {
        std::vector<Vertex> &vs;
        size_t keep;
        bool armed = true;
        ~Rollback() {
            if (armed) vs.erase(vs.begin() + static_cast<long>(keep), vs.end());
        }
    } rollback{vertices, vertices.size()};
    std::vector<Pending> pend;
    // A JGF vertex with its edge takes well over 100 bytes of text; the
    // estimate only reserves address space, which costs nothing untouched.
    size_t need = vertices.size() + text.size() / 128 + 16;
    if (vertices.capacity() < need) vertices.reserve(std::max(need, vertices.capacity() * 2));
    auto pend_key = [&pend](int k) { return pend[static_cast<size_t>(k)].key; };
    StrIndex<decltype(pend_key)> new_keys(pend_key);  // id -> index in pend
    StrIndex<PathOf> new_paths(PathOf{&vertices});    // containment paths of the new vertices
    std::unordered_set<std::string_view> new_other_paths;  // their paths in other subsystems
    std::map<std::string, int> new_roots;                  // subsystem -> roots among them
    std::vector<std::string> new_subsystems;               // subsystems the graph did not name yet
    auto note_subsystem = [&](std::string_view ss) {
        auto known = [ss](const std::vector<std::string> &names) {
            return std::find(names.begin(), names.end(), ss) != names.end();
        };
        if (!known(subsystems) && !known(new_subsystems)) new_subsystems.emplace_back(ss);
    };
    new_keys.reserve(text.size() / 256);
    new_paths.reserve(text.size() / 256);
    NumberedIds numbered(text.size() / 128 + 1024);  // id -> index in pend, for numbered ids
    auto new_key_index = [&](std::string_view key) {
        const int *slot = numbered.slot(key);
        return slot ? *slot : new_keys.find(key);
    };
    // While a vertex is read, the index slots the next one will take are
    // fetched: its id's and its dominant path's.
    auto prefetch_slots = [&](const json::Node &next) {
        if (const json::Node *id = next.find("id"); id && id->is_string()) new_keys.prefetch(id->str());
        if (const json::Node *md = next.find("metadata"))
            if (const json::Node *paths = md->find("paths"))
                if (const json::Node *path = paths->find(dom); path && path->is_string())
                    new_paths.prefetch(path->str());
    };
    size_t i = 0;
    // Vertices are read while the text is parsed, so the nodes never exist
    // as one document. A syntax error anywhere and the checks on the
    // document's shape still come first: the first vertex error is held
    // back until the whole text has parsed, and no vertex after it is read.
    std::string node_error;
    auto read_node = [&](const json::Node *n) {
        Where where{"node", i, {}, false};
        if (!n->is_object()) throw InputError(where.str() + ": must be an object");
        Pending p;
        p.key = outer_id(require(*n, "id", where), "node", i, scratch);
        where.key = p.key;
        where.keyed = true;
        const json::Node &md = require(*n, "metadata", where);
        if (!md.is_object()) throw InputError(where.str() + ": 'metadata' must be an object");
        const Metadata mf(md);
        const json::Node *type_v = opt_str(mf.type, "type", where);
        if (!type_v) throw InputError(where.str() + ": required key 'metadata.type' is missing");
        std::string_view type = type_v->str();
        if (type.empty()) throw InputError(where.str() + ": metadata.type is empty");
        p.type_name = type;
        if (!mf.paths) throw InputError(where.str() + " metadata: required key 'paths' is missing");
        const json::Node &paths = *mf.paths;
        if (!paths.is_object()) throw InputError(where.str() + ": metadata.paths must be an object");
        Vertex v;
        v.uniq_id = opt_int(mf.uniq_id, "uniq_id", -1, where);
        if (v.uniq_id == -1) {
            try {
                size_t used = 0;
                v.uniq_id = std::stoll(std::string(p.key), &used);
            } catch (...) {
                throw InputError(where.str() + ": uniq_id cannot be inferred from the outer id");
            }
        }
        const json::Node *name = opt_str(mf.name, "name", where);
        v.id = opt_int(mf.id, "id", -2, where);
        if (v.id == -2) {
            v.id = v.uniq_id;
            if (type == "node" && name) {
                std::string_view nm = name->str();
                size_t k = nm.size();
                while (k > 0 && std::isdigit(static_cast<unsigned char>(nm[k - 1]))) --k;
                if (k < nm.size()) {
                    try {
                        v.id = std::stoll(std::string(nm.substr(k)));
                    } catch (...) {
                        throw InputError(where.str() + ": cannot read an id from name " + std::string(nm));
                    }
                }
            }
        }
        v.rank = opt_int(mf.rank, "rank", -1, where);
        int64_t st = opt_int(mf.status, "status", 0, where);
        if (st != 0 && st != 1)
            throw InputError(where.str() + ": metadata.status must be 0 (up) or 1 (down)");
        v.status = st == 0 ? Status::Up : Status::Down;
        if (const json::Node *ex = mf.exclusive; ex && !ex->is_null() && !ex->is_bool())
            throw InputError(where.str() + ": metadata.exclusive must be a boolean");
        v.size = opt_int(mf.size, "size", 1, where);
        if (v.size < 0) throw InputError(where.str() + ": metadata.size must not be negative");
        const json::Node *basename = opt_str(mf.basename, "basename", where);
        v.basename = basename ? basename->str() : type;
        v.name = name ? name->str() : scratch.add(std::string(v.basename) + std::to_string(v.id));
        const json::Node *unit = opt_str(mf.unit, "unit", where);
        v.unit = unit ? unit->str() : std::string_view();
        // One path per subsystem the vertex belongs to.
        for (uint32_t k = 0; k < paths.n; ++k) {
            const json::Member &kv = paths.members[k];
            if (!kv.value.is_string())
                throw InputError(where.str() + ": metadata.paths." + std::string(kv.key) +
                                 " must be a string");
            if (kv.key.empty()) throw InputError(where.str() + ": metadata.paths has an empty subsystem name");
            if (kv.value.str().empty())
                throw InputError(where.str() + ": metadata.paths." + std::string(kv.key) + " is empty");
            note_subsystem(kv.key);
            if (kv.key == "containment")
                v.path = kv.value.str();
            else
                v.other_paths[std::string(kv.key)] = std::string(kv.value.str());
        }
        if (v.path.empty() && v.other_paths.empty())
            throw InputError(where.str() + ": metadata.paths names no subsystem");
        if (const json::Node *props = mf.properties; props && !props->is_null()) {
            if (!props->is_object())
                throw InputError(where.str() + ": metadata.properties must be an object or null");
            for (uint32_t k = 0; k < props->n; ++k) {
                const json::Member &kv = props->members[k];
                if (!kv.value.is_string())
                    throw InputError(where.str() + ": property '" + std::string(kv.key) +
                                     "' must be a string");
                v.properties[std::string(kv.key)] = std::string(kv.value.str());
            }
        }
        // The key's index in pend is inserted before pend grows: key_of is
        // only asked about keys already present.
        if (new_keys.insert(p.key, static_cast<int>(pend.size())) != static_cast<int>(pend.size()))
            throw InputError(where.str() + ": duplicate vertex id");
        if (int *slot = numbered.slot(p.key)) *slot = static_cast<int>(pend.size());
        // A root path other than the graph's is a second root, whatever its id.
        if (attach && root >= 0 && is_root_path(v.path) && vertices[static_cast<size_t>(root)].path != v.path)
            throw InputError(std::string(kDuplicateRoot) + " " + std::string(v.path) + ": the graph's root is " +
                             std::string(vertices[static_cast<size_t>(root)].path));
        int known = attach ? key_to_vertex_.find(p.key) : -1;
        if (known >= 0) {
            // Attaching a subgraph that names existing vertices (the path
            // from the root down to the attach point) is allowed.
            if (vertices[static_cast<size_t>(known)].path != v.path)
                throw InputError(where.str() + ": id already used by another vertex");
            p.existing = true;
            p.vertex = known;
        } else {
            if (!attach && key_to_vertex_.find(p.key) >= 0)
                throw InputError(where.str() + ": duplicate vertex id");
            p.vertex = static_cast<int>(vertices.size());
            // A path names one vertex, whatever its subsystem.
            auto taken = [&](std::string_view path) {
                return find_path(path) >= 0 || new_paths.find(path) >= 0 || new_other_paths.count(path);
            };
            if (!v.path.empty() && (find_path(v.path) >= 0 || new_paths.insert(v.path, p.vertex) != p.vertex))
                throw InputError(where.str() + ": duplicate containment path " + std::string(v.path));
            for (const auto &kv : v.other_paths) {
                if (taken(kv.second))
                    throw InputError(where.str() + ": duplicate " + kv.first + " path " + kv.second);
                // The map's strings stay put when the vertex moves.
                new_other_paths.insert(kv.second);
            }
            if (is_root_path(v.path)) ++new_roots["containment"];
            for (const auto &kv : v.other_paths)
                if (is_root_path(kv.second)) ++new_roots[kv.first];
            std::string_view dom_path = dom == "containment" ? v.path : std::string_view();
            if (dom != "containment")
                if (auto it = v.other_paths.find(dom); it != v.other_paths.end()) dom_path = it->second;
            p.in_dom = !dom_path.empty();
            p.root = p.in_dom && is_root_path(dom_path);
            vertices.push_back(std::move(v));
        }
        pend.push_back(p);
    };
    auto on_node = [&](const json::Node &n, const json::Node *next) {
        if (!node_error.empty()) return;
        if (next && next->is_object()) prefetch_slots(*next);
        try {
            read_node(&n);
            ++i;
        } catch (const InputError &e) {
            node_error = e.what();
        }
    };
    json::Document parsed = json::parse_document(text, {"graph", "nodes"}, on_node);
    const json::Node &doc = parsed.root();
    if (!doc.is_object()) throw InputError("JGF: the document must be an object");
    const json::Node &g = require(doc, "graph", std::string("JGF"));
    if (!g.is_object()) throw InputError("JGF: 'graph' must be an object");
    const json::Node &nodes = require(g, "nodes", std::string("JGF graph"));
    const json::Node *edges_v = g.find("edges");
    if (!nodes.is_array()) throw InputError("JGF: 'graph.nodes' must be an array");
    if (edges_v && !edges_v->is_array()) throw InputError("JGF: 'graph.edges' must be an array");
    if (!edges_v && !attach) throw InputError("JGF graph: required key 'edges' is missing");
    if (!node_error.empty()) throw InputError(node_error);
    // Roots: a path with a single '/'; one per subsystem at most, and the
    // dominant subsystem must have one.
    for (const auto &kv : new_roots) {
        if (kv.second > 1 || (rooted_.count(kv.first) && !(attach && kv.first == dom)))
            throw InputError("JGF: more than one " + kv.first + " root");
    }
    int roots = new_roots.count(dom) ? new_roots.at(dom) : 0;
    if (!attach && roots != 1)
        throw InputError("JGF: no " + dom + " root (a vertex whose " + dom + " path is '/<name>')");
    if (attach && (roots > 0 && root >= 0))
        throw InputError(std::string(kDuplicateRoot) + ": an attached subgraph cannot add a second root");

    // Vertex of a key known to be in the document or the graph.
    struct PendingEdge {
        int src, tgt;
    };
    std::vector<PendingEdge> pedges;  // dominant-subsystem edges only
    std::vector<int> foreign_parents;  // sources of edges in other subsystems
    // Dominant-subsystem parent of each new vertex (index - first_new), -1 if none.
    std::vector<int> new_parent(vertices.size() - static_cast<size_t>(first_new), -1);
    bool shared = false;  // some new vertex has more than one parent
    std::set<std::pair<int, int>> extra_parent_edges;
    if (edges_v) {
        pedges.reserve(edges_v->size());
        size_t j = 0;
        for (const json::Node *e = edges_v->begin_items(); e != edges_v->end_items(); ++e, ++j) {
            Where where{"edge", j, {}, false};
            if (!e->is_object()) throw InputError(where.str() + ": must be an object");
            const json::Node &s = require(*e, "source", where);
            const json::Node &t = require(*e, "target", where);
            std::string_view src = s.is_string() ? s.str()
                                   : s.is_int()  ? scratch.add(std::to_string(s.as_int()))
                                                 : std::string_view();
            std::string_view tgt = t.is_string() ? t.str()
                                   : t.is_int()  ? scratch.add(std::to_string(t.as_int()))
                                                 : std::string_view();
            if (src.empty() || tgt.empty())
                throw InputError(where.str() + ": source and target must be vertex id strings");
            std::string_view subsystem = "containment";
            if (const json::Node *md = e->find("metadata"); md && md->is_object())
                if (const json::Node *ss = md->find("subsystem"); ss && !ss->is_null()) {
                    if (!ss->is_string() || ss->str().empty())
                        throw InputError(where.str() + ": metadata.subsystem must be a non-empty string");
                    subsystem = ss->str();
                }
            note_subsystem(subsystem);
            int src_new = new_key_index(src);
            int tgt_new = new_key_index(tgt);
            int src_v = src_new >= 0 ? pend[static_cast<size_t>(src_new)].vertex : key_to_vertex_.find(src);
            int tgt_v = tgt_new >= 0 ? pend[static_cast<size_t>(tgt_new)].vertex : key_to_vertex_.find(tgt);
            bool src_known = src_v >= 0;
            bool tgt_known = tgt_v >= 0;
            if (!src_known)
                throw InputError(where.str() + ": unknown source vertex '" + std::string(src) + "'");
            if (!tgt_known)
                throw InputError(where.str() + ": unknown target vertex '" + std::string(tgt) + "'");
            if (subsystem != dom) {
                // Matching walks the dominant subsystem only; an edge of another
                // one just keeps its source from counting as a leaf.
                foreign_parents.push_back(src_v);
                continue;
            }
            bool is_tgt_new = tgt_new >= 0 && !pend[static_cast<size_t>(tgt_new)].existing;
            bool is_src_new = src_new >= 0 && !pend[static_cast<size_t>(src_new)].existing;
            if (src == tgt) throw InputError(where.str() + ": an edge cannot loop on one vertex");
            auto must_be_in_dom = [&](bool fresh, int k, std::string_view key) {
                if (fresh && !pend[static_cast<size_t>(k)].in_dom)
                    throw InputError(where.str() + ": vertex '" + std::string(key) + "' has no " + dom +
                                     " path, yet a " + dom + " edge joins it");
            };
            must_be_in_dom(is_src_new, src_new, src);
            must_be_in_dom(is_tgt_new, tgt_new, tgt);
            if (is_tgt_new && pend[static_cast<size_t>(tgt_new)].root)
                throw InputError(where.str() + ": vertex '" + std::string(tgt) + "' is the " + dom +
                                 " root; no " + dom + " edge may point to it");
            if (!is_tgt_new && src_v >= first_new)
                throw InputError(where.str() + ": vertex '" + std::string(tgt) +
                                 "' is already in the graph; a new vertex cannot contain it");
            if (is_tgt_new) {
                // A vertex may have several containment parents (storage shared
                // by levels, as GRUG's associations build); the first is its parent.
                if (pend[static_cast<size_t>(tgt_new)].parents++ == 0) {
                    new_parent[static_cast<size_t>(tgt_v - first_new)] = src_v;
                } else {
                    shared = true;
                    if (new_parent[static_cast<size_t>(tgt_v - first_new)] == src_v ||
                        !extra_parent_edges.insert({src_v, tgt_v}).second)
                        throw InputError(where.str() + ": containment edge " + std::string(src) + " -> " +
                                         std::string(tgt) + " is given twice");
                }
            }
            pedges.push_back(PendingEdge{src_v, tgt_v});
        }
    }
    for (const auto &p : pend) {
        if (p.existing) continue;
        if (p.in_dom && !p.root && p.parents == 0)
            throw InputError("JGF node '" + std::string(p.key) + "': no " + dom + " edge reaches it (path " +
                             std::string(path_in(p.vertex, dom)) + ")");
    }
    // Every new vertex has at most one parent, so following parents from it
    // either reaches the root or a vertex already in the graph, or loops. A
    // loop would make every walk of the tree run forever: reject it.
    {
        enum : char { kUnseen = 0, kOnChain = 1, kReaches = 2 };
        std::vector<char> state(new_parent.size(), kUnseen);
        std::vector<int> chain;
        for (size_t k = 0; k < new_parent.size(); ++k) {
            chain.clear();
            int x = first_new + static_cast<int>(k);
            while (x >= first_new && state[static_cast<size_t>(x - first_new)] == kUnseen) {
                state[static_cast<size_t>(x - first_new)] = kOnChain;
                chain.push_back(x);
                x = new_parent[static_cast<size_t>(x - first_new)];
            }
            if (x >= first_new && state[static_cast<size_t>(x - first_new)] == kOnChain) {
                throw InputError("JGF: vertex at path " + std::string(path_in(x, dom)) + " is in a " + dom +
                                 " cycle and cannot be reached from the root; " + dom +
                                 " edges must form a tree under the root");
            }
            for (int c : chain) state[static_cast<size_t>(c - first_new)] = kReaches;
        }
    }
    // The walks (match, update, cancel, writers) recurse once per level, so a
    // tree deeper than any real machine room could exhaust the stack: refuse it.
    {
        std::vector<int> depth(new_parent.size(), 0);  // 0: not known yet
        std::vector<int> chain;
        for (size_t k = 0; k < new_parent.size(); ++k) {
            chain.clear();
            int x = first_new + static_cast<int>(k);
            while (x >= first_new && depth[static_cast<size_t>(x - first_new)] == 0) {
                chain.push_back(x);
                x = new_parent[static_cast<size_t>(x - first_new)];
            }
            int d = 0;
            if (x >= first_new) {
                d = depth[static_cast<size_t>(x - first_new)];
            } else {
                for (int up = x; up >= 0 && d <= kMaxTreeDepth; up = parent(up)) ++d;
            }
            for (auto c = chain.rbegin(); c != chain.rend(); ++c) {
                if (++d > kMaxTreeDepth) {
                    std::string_view where = path_in(*c, dom);
                    if (where.size() > 120) where = where.substr(where.size() - 120);
                    throw InputError("JGF: the " + dom + " tree is deeper than " + std::to_string(kMaxTreeDepth) +
                                     " levels (at ..." + std::string(where) + "); such a tree is not accepted");
                }
                depth[static_cast<size_t>(*c - first_new)] = d;
            }
        }
    }
    if (shared) {
        std::vector<std::pair<int, int>> links;
        links.reserve(pedges.size());
        for (const auto &pe : pedges) links.push_back({pe.src, pe.tgt});
        reject_shared_cycles(links, first_new);
    }

    // Commit.
    rollback.armed = false;
    std::vector<int> added;
    added.reserve(vertices.size() - static_cast<size_t>(first_new));
    // On a first load the indexes built while validating already map every
    // key and path to its vertex.
    const bool adopt = first_new == 0 && by_path.empty() && key_to_vertex_.empty();
    if (adopt) {
        by_path.adopt(std::move(new_paths));
        key_to_vertex_.adopt(std::move(new_keys));
    } else {
        by_path.reserve(vertices.size());
        key_to_vertex_.reserve(vertices.size());
    }
    vertex_key_.reserve(vertices.size());
    // Type ids and partial-pool flags of the type names met in this document.
    std::unordered_map<std::string_view, std::pair<int, bool>> type_info;
    for (auto &p : pend) {
        if (p.existing) continue;
        int idx = p.vertex;
        Vertex &v = vertices[static_cast<size_t>(idx)];
        auto ti = type_info.find(p.type_name);
        if (ti == type_info.end()) {
            std::string tn(p.type_name);
            bool partial = opts_.partial_pool_types.count("*") || opts_.partial_pool_types.count(tn);
            ti = type_info.emplace(p.type_name, std::make_pair(types.intern(tn), partial)).first;
        }
        v.type = ti->second.first;
        v.partial_pool = ti->second.second;
        v.basename = strings.intern(v.basename);
        v.unit = strings.intern(v.unit);
        v.name = strings.add(v.name);
        if (!v.path.empty()) v.path = strings.add(v.path);
        for (const auto &kv : v.other_paths) other_path_index_[kv.second] = idx;
        v.plans = Planner(start(), duration(), v.size);
        v.x_checker = Planner(start(), duration(), kXCheckerJobs);
        std::string_view key = strings.add(p.key);
        vertex_key_.push_back(key);
        if (!adopt) {
            key_to_vertex_.assign(key, idx);
            if (!v.path.empty()) by_path.assign(v.path, idx);
        }
        index_vertex(idx);
        added.push_back(idx);
        if (p.root) root = idx;
    }
    for (auto &kv : new_roots) rooted_.insert(kv.first);
    for (auto &ss : new_subsystems) subsystems.push_back(std::move(ss));
    for (int src : foreign_parents) vertices[static_cast<size_t>(src)].foreign_children = true;
    edges.reserve(edges.size() + pedges.size());
    for (const auto &pe : pedges) {
        // New vertices were appended, so they are exactly the indices from first_new on.
        bool touches_new = pe.src >= first_new || pe.tgt >= first_new;
        if (attach && !touches_new) continue;
        add_edge(pe.src, pe.tgt);
    }
    return added;
}

void Graph::load_jgf(std::string_view text) {
    if (!vertices.empty()) throw StateError("graph already loaded");
    read_jgf(text, false);
}

std::vector<int> Graph::attach_jgf(std::string_view text) {
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
