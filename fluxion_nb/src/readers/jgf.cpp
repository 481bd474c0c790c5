#include "readers/jgf.hpp"

#include <algorithm>
#include <cctype>
#include <unordered_map>

#include "util/errors.hpp"

namespace fluxion {

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

}  // namespace

JgfReader::JgfReader(Graph &g, std::string_view text, bool attach)
    : g_(g),
      text_(text),
      attach_(attach),
      dom_(g.subsystem()),
      first_new_(static_cast<int>(g.vertices.size())),
      new_keys_(KeyOfPending{&pend_}),
      new_paths_(Graph::PathOf{&g.vertices}),
      numbered_(text.size() / 128 + 1024) {
    // A JGF vertex with its edge takes well over 100 bytes of text; the
    // estimate only reserves address space, which costs nothing untouched.
    size_t need = g_.vertices.size() + text.size() / 128 + 16;
    if (g_.vertices.capacity() < need) g_.vertices.reserve(std::max(need, g_.vertices.capacity() * 2));
    new_keys_.reserve(text.size() / 256);
    new_paths_.reserve(text.size() / 256);
}

JgfReader::~JgfReader() {
    // New vertices point into the parsed text until the commit: drop them.
    if (!committed_) g_.vertices.erase(g_.vertices.begin() + first_new_, g_.vertices.end());
}

std::vector<int> JgfReader::read() {
    // Vertices are read while the text is parsed, so the nodes never exist
    // as one document.
    json::Document parsed = json::parse_document(
        text_, {"graph", "nodes"}, [this](const json::Node &n, const json::Node *next) { on_vertex(n, next); });
    const json::Node *edges = check_document(parsed.root());
    new_parent_.assign(g_.vertices.size() - static_cast<size_t>(first_new_), -1);
    if (edges) {
        edges_.reserve(edges->size());
        size_t j = 0;
        for (const json::Node *e = edges->begin_items(); e != edges->end_items(); ++e, ++j) read_edge(*e, j);
    }
    check_reached();
    check_no_cycles();
    check_depth();
    if (shared_) check_shared_cycles();
    return commit();
}

void JgfReader::note_subsystem(std::string_view ss) {
    auto known = [ss](const std::vector<std::string> &names) {
        return std::find(names.begin(), names.end(), ss) != names.end();
    };
    if (!known(g_.subsystems) && !known(new_subsystems_)) new_subsystems_.emplace_back(ss);
}

inline int JgfReader::new_key_index(std::string_view key) {
    const int *slot = numbered_.slot(key);
    return slot ? *slot : new_keys_.find(key);
}

// While a vertex is read, the index slots the next one will take are
// fetched: its id's and its dominant path's.
inline void JgfReader::prefetch_slots(const json::Node &next) {
    if (const json::Node *id = next.find("id"); id && id->is_string()) new_keys_.prefetch(id->str());
    if (const json::Node *md = next.find("metadata"))
        if (const json::Node *paths = md->find("paths"))
            if (const json::Node *path = paths->find(dom_); path && path->is_string())
                new_paths_.prefetch(path->str());
}

// A syntax error anywhere and the checks on the document's shape still come
// first: the first vertex error is held back until the whole text has parsed,
// and no vertex after it is read.
void JgfReader::on_vertex(const json::Node &n, const json::Node *next) {
    if (!node_error_.empty()) return;
    if (next && next->is_object()) prefetch_slots(*next);
    try {
        read_vertex(n);
        ++nodes_seen_;
    } catch (const InputError &e) {
        node_error_ = e.what();
    }
}

void JgfReader::read_vertex(const json::Node &node) {
    const json::Node *n = &node;
    size_t i = nodes_seen_;
    Where where{"node", i, {}, false};
    if (!n->is_object()) throw InputError(where.str() + ": must be an object");
    Pending p;
    p.key = outer_id(require(*n, "id", where), "node", i, scratch_);
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
    v.name = name ? name->str() : scratch_.add(std::string(v.basename) + std::to_string(v.id));
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
    // The key's index in pend_ is inserted before pend_ grows: key_of is
    // only asked about keys already present.
    if (new_keys_.insert(p.key, static_cast<int>(pend_.size())) != static_cast<int>(pend_.size()))
        throw InputError(where.str() + ": duplicate vertex id");
    if (int *slot = numbered_.slot(p.key)) *slot = static_cast<int>(pend_.size());
    // A root path other than the graph's is a second root, whatever its id.
    if (attach_ && g_.root >= 0 && is_root_path(v.path) && g_.vertices[static_cast<size_t>(g_.root)].path != v.path)
        throw InputError(std::string(kDuplicateRoot) + " " + std::string(v.path) + ": the graph's root is " +
                         std::string(g_.vertices[static_cast<size_t>(g_.root)].path));
    int known = attach_ ? g_.key_to_vertex_.find(p.key) : -1;
    if (known >= 0) {
        // Attaching a subgraph that names existing g_.vertices (the path
        // from the root down to the attach point) is allowed.
        if (g_.vertices[static_cast<size_t>(known)].path != v.path)
            throw InputError(where.str() + ": id already used by another vertex");
        p.existing = true;
        p.vertex = known;
    } else {
        if (!attach_ && g_.key_to_vertex_.find(p.key) >= 0)
            throw InputError(where.str() + ": duplicate vertex id");
        p.vertex = static_cast<int>(g_.vertices.size());
        // A path names one vertex, whatever its subsystem.
        auto taken = [&](std::string_view path) {
            return g_.find_path(path) >= 0 || new_paths_.find(path) >= 0 || new_other_paths_.count(path);
        };
        if (!v.path.empty() && (g_.find_path(v.path) >= 0 || new_paths_.insert(v.path, p.vertex) != p.vertex))
            throw InputError(where.str() + ": duplicate containment path " + std::string(v.path));
        for (const auto &kv : v.other_paths) {
            if (taken(kv.second))
                throw InputError(where.str() + ": duplicate " + kv.first + " path " + kv.second);
            // The map's strings stay put when the vertex moves.
            new_other_paths_.insert(kv.second);
        }
        if (is_root_path(v.path)) ++new_roots_["containment"];
        for (const auto &kv : v.other_paths)
            if (is_root_path(kv.second)) ++new_roots_[kv.first];
        std::string_view dom_path = dom_ == "containment" ? v.path : std::string_view();
        if (dom_ != "containment")
            if (auto it = v.other_paths.find(dom_); it != v.other_paths.end()) dom_path = it->second;
        p.in_dom = !dom_path.empty();
        p.root = p.in_dom && is_root_path(dom_path);
        g_.vertices.push_back(std::move(v));
    }
    pend_.push_back(p);
}

const json::Node *JgfReader::check_document(const json::Node &doc) {
    
    if (!doc.is_object()) throw InputError("JGF: the document must be an object");
    const json::Node &g = require(doc, "graph", std::string("JGF"));
    if (!g.is_object()) throw InputError("JGF: 'graph' must be an object");
    const json::Node &nodes = require(g, "nodes", std::string("JGF graph"));
    const json::Node *edges = g.find("edges");
    if (!nodes.is_array()) throw InputError("JGF: 'graph.nodes' must be an array");
    if (edges && !edges->is_array()) throw InputError("JGF: 'graph.edges' must be an array");
    if (!edges && !attach_) throw InputError("JGF graph: required key 'edges' is missing");
    if (!node_error_.empty()) throw InputError(node_error_);
    // Roots: a path with a single '/'; one per subsystem at most, and the
    // dominant subsystem must have one.
    for (const auto &kv : new_roots_) {
        if (kv.second > 1 || (g_.rooted_.count(kv.first) && !(attach_ && kv.first == dom_)))
            throw InputError("JGF: more than one " + kv.first + " root");
    }
    int roots = new_roots_.count(dom_) ? new_roots_.at(dom_) : 0;
    if (!attach_ && roots != 1)
        throw InputError("JGF: no " + dom_ + " root (a vertex whose " + dom_ + " path is '/<name>')");
    if (attach_ && (roots > 0 && g_.root >= 0))
        throw InputError(std::string(kDuplicateRoot) + ": an attached subgraph cannot add a second root");
    return edges;
}

void JgfReader::read_edge(const json::Node &e, size_t j) {
    Where where{"edge", j, {}, false};
    if (!e.is_object()) throw InputError(where.str() + ": must be an object");
    const json::Node &s = require(e, "source", where);
    const json::Node &t = require(e, "target", where);
    std::string_view src = s.is_string() ? s.str()
                           : s.is_int()  ? scratch_.add(std::to_string(s.as_int()))
                                         : std::string_view();
    std::string_view tgt = t.is_string() ? t.str()
                           : t.is_int()  ? scratch_.add(std::to_string(t.as_int()))
                                         : std::string_view();
    if (src.empty() || tgt.empty())
        throw InputError(where.str() + ": source and target must be vertex id strings");
    std::string_view subsystem = "containment";
    if (const json::Node *md = e.find("metadata"); md && md->is_object())
        if (const json::Node *ss = md->find("subsystem"); ss && !ss->is_null()) {
            if (!ss->is_string() || ss->str().empty())
                throw InputError(where.str() + ": metadata.subsystem must be a non-empty string");
            subsystem = ss->str();
        }
    note_subsystem(subsystem);
    int src_new = new_key_index(src);
    int tgt_new = new_key_index(tgt);
    int src_v = src_new >= 0 ? pend_[static_cast<size_t>(src_new)].vertex : g_.key_to_vertex_.find(src);
    int tgt_v = tgt_new >= 0 ? pend_[static_cast<size_t>(tgt_new)].vertex : g_.key_to_vertex_.find(tgt);
    bool src_known = src_v >= 0;
    bool tgt_known = tgt_v >= 0;
    if (!src_known)
        throw InputError(where.str() + ": unknown source vertex '" + std::string(src) + "'");
    if (!tgt_known)
        throw InputError(where.str() + ": unknown target vertex '" + std::string(tgt) + "'");
    if (subsystem != dom_) {
        // Matching walks the dominant subsystem only; an edge of another
        // one just keeps its source from counting as a leaf.
        foreign_parents_.push_back(src_v);
        return;
    }
    bool is_tgt_new = tgt_new >= 0 && !pend_[static_cast<size_t>(tgt_new)].existing;
    bool is_src_new = src_new >= 0 && !pend_[static_cast<size_t>(src_new)].existing;
    if (src == tgt) throw InputError(where.str() + ": an edge cannot loop on one vertex");
    auto must_be_in_dom = [&](bool fresh, int k, std::string_view key) {
        if (fresh && !pend_[static_cast<size_t>(k)].in_dom)
            throw InputError(where.str() + ": vertex '" + std::string(key) + "' has no " + dom_ +
                             " path, yet a " + dom_ + " edge joins it");
    };
    must_be_in_dom(is_src_new, src_new, src);
    must_be_in_dom(is_tgt_new, tgt_new, tgt);
    if (is_tgt_new && pend_[static_cast<size_t>(tgt_new)].root)
        throw InputError(where.str() + ": vertex '" + std::string(tgt) + "' is the " + dom_ +
                         " root; no " + dom_ + " edge may point to it");
    if (!is_tgt_new && src_v >= first_new_)
        throw InputError(where.str() + ": vertex '" + std::string(tgt) +
                         "' is already in the graph; a new vertex cannot contain it");
    if (is_tgt_new) {
        // A vertex may have several containment parents (storage shared
        // by levels, as GRUG's associations build); the first is its parent.
        if (pend_[static_cast<size_t>(tgt_new)].parents++ == 0) {
            new_parent_[static_cast<size_t>(tgt_v - first_new_)] = src_v;
        } else {
            shared_ = true;
            if (new_parent_[static_cast<size_t>(tgt_v - first_new_)] == src_v ||
                !extra_parent_edges_.insert({src_v, tgt_v}).second)
                throw InputError(where.str() + ": containment edge " + std::string(src) + " -> " +
                                 std::string(tgt) + " is given twice");
        }
    }
    edges_.push_back(PendingEdge{src_v, tgt_v});
}

void JgfReader::check_reached() {
    for (const auto &p : pend_) {
        if (p.existing) continue;
        if (p.in_dom && !p.root && p.parents == 0)
            throw InputError("JGF node '" + std::string(p.key) + "': no " + dom_ + " edge reaches it (path " +
                             std::string(g_.path_in(p.vertex, dom_)) + ")");
    }
}

// Every new vertex has at most one parent, so following parents from it
// either reaches the root or a vertex already in the graph, or loops. A
// loop would make every walk of the tree run forever: reject it.
void JgfReader::check_no_cycles() {
    enum : char { kUnseen = 0, kOnChain = 1, kReaches = 2 };
    std::vector<char> state(new_parent_.size(), kUnseen);
    std::vector<int> chain;
    for (size_t k = 0; k < new_parent_.size(); ++k) {
        chain.clear();
        int x = first_new_ + static_cast<int>(k);
        while (x >= first_new_ && state[static_cast<size_t>(x - first_new_)] == kUnseen) {
            state[static_cast<size_t>(x - first_new_)] = kOnChain;
            chain.push_back(x);
            x = new_parent_[static_cast<size_t>(x - first_new_)];
        }
        if (x >= first_new_ && state[static_cast<size_t>(x - first_new_)] == kOnChain) {
            throw InputError("JGF: vertex at path " + std::string(g_.path_in(x, dom_)) + " is in a " + dom_ +
                             " cycle and cannot be reached from the root; " + dom_ +
                             " edges must form a tree under the root");
        }
        for (int c : chain) state[static_cast<size_t>(c - first_new_)] = kReaches;
    }
}

// The walks (match, update, cancel, writers) recurse once per level, so a
// tree deeper than any real machine room could exhaust the stack: refuse it.
void JgfReader::check_depth() {
    std::vector<int> depth(new_parent_.size(), 0);  // 0: not known yet
    std::vector<int> chain;
    for (size_t k = 0; k < new_parent_.size(); ++k) {
        chain.clear();
        int x = first_new_ + static_cast<int>(k);
        while (x >= first_new_ && depth[static_cast<size_t>(x - first_new_)] == 0) {
            chain.push_back(x);
            x = new_parent_[static_cast<size_t>(x - first_new_)];
        }
        int d = 0;
        if (x >= first_new_) {
            d = depth[static_cast<size_t>(x - first_new_)];
        } else {
            for (int up = x; up >= 0 && d <= Graph::kMaxTreeDepth; up = g_.parent(up)) ++d;
        }
        for (auto c = chain.rbegin(); c != chain.rend(); ++c) {
            if (++d > Graph::kMaxTreeDepth) {
                std::string_view where = g_.path_in(*c, dom_);
                if (where.size() > 120) where = where.substr(where.size() - 120);
                throw InputError("JGF: the " + dom_ + " tree is deeper than " + std::to_string(Graph::kMaxTreeDepth) +
                                 " levels (at ..." + std::string(where) + "); such a tree is not accepted");
            }
            depth[static_cast<size_t>(*c - first_new_)] = d;
        }
    }
}

void JgfReader::check_shared_cycles() const {
    // Every new vertex reaches the root by its first parents; with more
    // parents a loop can still close through the others. Colour depth-first
    // over the new g_.vertices: reaching one still on the path is a loop.
    size_t n = g_.vertices.size() - static_cast<size_t>(first_new_);
    std::vector<std::vector<int>> kids(n);
    for (const auto &pe : edges_)
        if (pe.src >= first_new_ && pe.tgt >= first_new_)
            kids[static_cast<size_t>(pe.src - first_new_)].push_back(pe.tgt - first_new_);
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
                                 std::string(g_.vertices[static_cast<size_t>(k + first_new_)].path) +
                                 " is in a containment cycle; containment edges must not loop");
            if (color[static_cast<size_t>(k)] == kWhite) {
                color[static_cast<size_t>(k)] = kGray;
                stack.push_back({k, 0});
            }
        }
    }
}

std::vector<int> JgfReader::commit() {
    committed_ = true;
    std::vector<int> added;
    added.reserve(g_.vertices.size() - static_cast<size_t>(first_new_));
    // On a first load the indexes built while validating already map every
    // key and path to its vertex.
    const bool adopt = first_new_ == 0 && g_.by_path.empty() && g_.key_to_vertex_.empty();
    if (adopt) {
        g_.by_path.adopt(std::move(new_paths_));
        g_.key_to_vertex_.adopt(std::move(new_keys_));
    } else {
        g_.by_path.reserve(g_.vertices.size());
        g_.key_to_vertex_.reserve(g_.vertices.size());
    }
    g_.vertex_key_.reserve(g_.vertices.size());
    // Type ids and partial-pool flags of the type names met in this document.
    std::unordered_map<std::string_view, std::pair<int, bool>> type_info;
    for (auto &p : pend_) {
        if (p.existing) continue;
        int idx = p.vertex;
        Vertex &v = g_.vertices[static_cast<size_t>(idx)];
        auto ti = type_info.find(p.type_name);
        if (ti == type_info.end()) {
            std::string tn(p.type_name);
            bool partial = g_.opts_.partial_pool_types.count("*") || g_.opts_.partial_pool_types.count(tn);
            ti = type_info.emplace(p.type_name, std::make_pair(g_.types.intern(tn), partial)).first;
        }
        v.type = ti->second.first;
        v.partial_pool = ti->second.second;
        v.basename = g_.strings.intern(v.basename);
        v.unit = g_.strings.intern(v.unit);
        v.name = g_.strings.add(v.name);
        if (!v.path.empty()) v.path = g_.strings.add(v.path);
        for (const auto &kv : v.other_paths) g_.other_path_index_[kv.second] = idx;
        v.plans = Planner(g_.start(), g_.plan_duration(), v.size);
        v.x_checker = Planner(g_.start(), g_.plan_duration(), kXCheckerJobs);
        std::string_view key = g_.strings.add(p.key);
        g_.vertex_key_.push_back(key);
        if (!adopt) {
            g_.key_to_vertex_.assign(key, idx);
            if (!v.path.empty()) g_.by_path.assign(v.path, idx);
        }
        g_.index_vertex(idx);
        added.push_back(idx);
        if (p.root) g_.root = idx;
    }
    for (auto &kv : new_roots_) g_.rooted_.insert(kv.first);
    for (auto &ss : new_subsystems_) g_.subsystems.push_back(std::move(ss));
    for (int src : foreign_parents_) g_.vertices[static_cast<size_t>(src)].foreign_children = true;
    g_.edges.reserve(g_.edges.size() + edges_.size());
    for (const auto &pe : edges_) {
        // New vertices were appended, so they are exactly the indices from first_new_ on.
        bool touches_new = pe.src >= first_new_ || pe.tgt >= first_new_;
        if (attach_ && !touches_new) continue;
        g_.add_edge(pe.src, pe.tgt);
    }
    return added;
}

}  // namespace fluxion

