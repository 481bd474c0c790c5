#include "writers/writers.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <string_view>

#include "util/errors.hpp"
#include "jobspec/jobspec.hpp"
#include "util/json.hpp"
#include "util/small_vec.hpp"

namespace fluxion {

namespace {

std::string write_simple(const Graph &g, const Emission &em, bool pretty) {
    std::string out;
    out.reserve(em.vertices.size() * 32);
    auto line = [&](const EmittedVertex &ev) {
        const Vertex &v = g.vertices[static_cast<size_t>(ev.vertex)];
        out += "      ";
        for (int i = 0; i < ev.level; ++i) out += "---";
        out += v.name;
        out += '[';
        out += std::to_string(ev.needs);
        out += ':';
        out += pretty ? (ev.exclusive ? "exclusive" : "shared") : (ev.exclusive ? "x" : "s");
        out += "]\n";
    };
    if (pretty)
        for (auto it = em.vertices.rbegin(); it != em.vertices.rend(); ++it) line(*it);
    else
        for (const auto &ev : em.vertices) line(ev);
    return out;
}

// The writers below emit JSON straight into the output, with json::dump's
// spacing (", " and ": "), rather than building a json::Value tree first: a
// small match's R is otherwise a good part of its cost.
void append_key(std::string &out, std::string_view key, bool first = false) {
    if (!first) out += ", ";
    json::dump_string(out, key);
    out += ": ";
}

void append_string_map(std::string &out, const std::map<std::string, std::string> &m) {
    out += '{';
    bool first = true;
    for (const auto &kv : m) {
        append_key(out, kv.first, first);
        first = false;
        json::dump_string(out, kv.second);
    }
    out += '}';
}

void append_jgf_nodes(std::string &out, const Graph &g, const Emission &em) {
    bool first = true;
    for (const auto &ev : em.vertices) {
        const Vertex &v = g.vertices[static_cast<size_t>(ev.vertex)];
        const std::string &tname = g.types.name(v.type);
        if (!first) out += ", ";
        first = false;
        out += "{\"id\": \"" + std::to_string(v.uniq_id) + "\", \"metadata\": {";
        append_key(out, "type", true);
        json::dump_string(out, tname);
        if (v.basename != tname) {
            append_key(out, "basename");
            json::dump_string(out, v.basename);
        }
        if (v.name != std::string(v.basename) + std::to_string(v.id)) {
            append_key(out, "name");
            json::dump_string(out, v.name);
        }
        out += ", \"id\": " + std::to_string(v.id) + ", \"rank\": " + std::to_string(v.rank);
        if (!v.properties.empty()) {
            append_key(out, "properties");
            append_string_map(out, v.properties.get());
        }
        // No "unit": flux-sched's JGF reader drops it, so its R never carries one.
        if (ev.exclusive) out += ", \"exclusive\": true";
        if (ev.needs != 1) out += ", \"size\": " + std::to_string(ev.needs);
        out += ", \"paths\": {";
        bool first_path = true;
        for (const std::string &ss : g.subsystems)
            if (std::string_view p = g.path_in(ev.vertex, ss); !p.empty()) {
                append_key(out, ss, first_path);
                first_path = false;
                json::dump_string(out, p);
            }
        out += '}';
        auto af = em.agfilter.find(ev.vertex);
        if (af != em.agfilter.end()) {
            append_key(out, "agfilter");
            append_string_map(out, af->second);
        }
        out += "}}";
    }
}

void append_jgf_edges(std::string &out, const Graph &g, const Emission &em) {
    bool first = true;
    for (int e : em.edges) {
        const Edge &ed = g.edges[static_cast<size_t>(e)];
        if (!first) out += ", ";
        first = false;
        out += "{\"source\": \"" + std::to_string(g.vertices[static_cast<size_t>(ed.source)].uniq_id) +
               "\", \"target\": \"" + std::to_string(g.vertices[static_cast<size_t>(ed.target)].uniq_id) + '"';
        if (g.subsystem() != "containment") {
            out += ", \"metadata\": {\"subsystem\": ";
            json::dump_string(out, g.subsystem());
            out += '}';
        }
        out += '}';
    }
}

// JGF of the emission, after what an earlier unprinted one left (if any).
void append_jgf(std::string &out, const Graph &g, const Emission &em, const UnprintedSchedule *before = nullptr) {
    out += "{\"graph\": {\"nodes\": [";
    if (before && !before->nodes.empty()) {
        out += before->nodes;
        if (!em.vertices.empty()) out += ", ";
    }
    append_jgf_nodes(out, g, em);
    out += "], \"edges\": [";
    if (before && !before->edges.empty()) {
        out += before->edges;
        if (!em.edges.empty()) out += ", ";
    }
    append_jgf_edges(out, g, em);
    out += "]}}";
}

// Keep the emission's JGF for the next R written (see UnprintedSchedule).
void keep_unprinted(UnprintedSchedule &carry, const Graph &g, const Emission &em) {
    if (!em.vertices.empty()) {
        if (!carry.nodes.empty()) carry.nodes += ", ";
        append_jgf_nodes(carry.nodes, g, em);
    }
    if (!em.edges.empty()) {
        if (!carry.edges.empty()) carry.edges += ", ";
        append_jgf_edges(carry.edges, g, em);
    }
}

// What rv1 writes beside R_lite: the nodes (rank, name) in emission order,
// and for each property of theirs ("key" or "key=value") the ranks carrying it.
struct NodeList {
    std::vector<std::pair<int64_t, std::string_view>> nodes;
    std::map<std::string, std::vector<int64_t>> properties;
};

// R_lite: core and gpu ids gathered per node (and storage node), nodes with
// the same children merged into one rank set. As flux-sched's writer: a node
// with neither is left out, and the entries come in the order of their
// children's text.
void append_rlite(std::string &out, const Graph &g, const Emission &em, NodeList *nodes = nullptr) {
    // Reducer types in type order, each with its ids since the last node
    // (sorted and deduplicated there).
    struct Pending {
        int type;
        SmallVec<int64_t, 64> ids;
        bool sorted = true;  // ids arrive in order when a node is emitted whole
    };
    Pending pending[2] = {{std::min(g.types.core, g.types.gpu), {}, true},
                          {std::max(g.types.core, g.types.gpu), {}, true}};
    // Nodes with the same children are written once, with all their ranks:
    // each group's children text is a slice of `sigs`.
    struct Group {
        size_t at, len;
        std::vector<int64_t> ranks;
    };
    std::vector<Group> groups;
    std::string sigs;
    for (const auto &ev : em.vertices) {
        const Vertex &v = g.vertices[static_cast<size_t>(ev.vertex)];
        if (v.type == pending[0].type || v.type == pending[1].type) {
            Pending &p = pending[v.type == pending[0].type ? 0 : 1];
            if (!p.ids.empty() && v.id < p.ids.back()) p.sorted = false;
            p.ids.push_back(v.id);
        } else if (v.type == g.types.node || v.type == g.types.storage_node) {
            if (pending[0].ids.empty() && pending[1].ids.empty()) continue;
            if (nodes) {
                nodes->nodes.emplace_back(v.rank, v.name);
                if (!v.properties.empty())
                    for (const auto &kv : v.properties.get())
                        nodes->properties[kv.second.empty() ? kv.first : kv.first + "=" + kv.second].push_back(
                            v.rank);
            }
            size_t at = sigs.size();
            sigs += '{';
            for (auto &p : pending) {
                auto &ids = p.ids;
                if (ids.empty()) continue;
                if (!p.sorted) std::sort(ids.begin(), ids.end());
                if (sigs.size() > at + 1) sigs += ", ";
                json::dump_string(sigs, g.types.name(p.type));
                sigs += ": \"";  // an id set needs no escaping
                append_sorted_idset(sigs, ids.begin(), ids.end());
                sigs += '"';
                ids.clear();
                p.sorted = true;
            }
            sigs += '}';
            std::string_view sig(sigs.data() + at, sigs.size() - at);
            auto grp = std::find_if(groups.begin(), groups.end(), [&](const Group &x) {
                return std::string_view(sigs.data() + x.at, x.len) == sig;
            });
            if (grp != groups.end()) {
                grp->ranks.push_back(v.rank);
                sigs.resize(at);
            } else {
                groups.push_back(Group{at, sigs.size() - at, {v.rank}});
            }
        }
    }
    std::sort(groups.begin(), groups.end(), [&sigs](const Group &a, const Group &b) {
        return std::string_view(sigs.data() + a.at, a.len) < std::string_view(sigs.data() + b.at, b.len);
    });
    out += '[';
    for (size_t k = 0; k < groups.size(); ++k) {
        if (k) out += ", ";
        out += "{\"rank\": \"";
        std::vector<int64_t> &ranks = groups[k].ranks;
        if (!std::is_sorted(ranks.begin(), ranks.end())) std::sort(ranks.begin(), ranks.end());
        append_sorted_idset(out, ranks.data(), ranks.data() + ranks.size());
        out += "\", \"children\": ";
        out.append(sigs, groups[k].at, groups[k].len);
        out += '}';
    }
    out += ']';
}

// False, with `out` to be thrown away, when R_lite records no node: then
// flux-sched's writers write nothing at all.
bool append_rv1(std::string &out, const Graph &g, const Emission &em, bool sched, UnprintedSchedule *carry) {
    out += "{\"version\": 1, \"execution\": {\"R_lite\": ";
    NodeList listed;
    append_rlite(out, g, em, &listed);
    if (listed.nodes.empty()) return false;
    // Node names in rank order, compressed as a host list.
    auto &ranked = listed.nodes;
    std::stable_sort(ranked.begin(), ranked.end());
    out += ", \"nodelist\": [";
    if (!ranked.empty()) {
        std::vector<std::string_view> names;
        names.reserve(ranked.size());
        for (auto &r : ranked) names.push_back(r.second);
        std::string list;
        append_hostlist(list, names);
        json::dump_string(out, list);
    }
    out += ']';
    if (!listed.properties.empty()) {
        out += ", \"properties\": {";
        bool first = true;
        for (auto &kv : listed.properties) {
            append_key(out, kv.first, first);
            first = false;
            std::sort(kv.second.begin(), kv.second.end());
            out += '"';
            append_sorted_idset(out, kv.second.data(), kv.second.data() + kv.second.size());
            out += '"';
        }
        out += '}';
    }
    out += ", \"starttime\": ";
    json::append_int(out, em.starttime);
    out += ", \"expiration\": ";
    json::append_int(out, em.expiration);
    out += '}';
    if (sched) {
        out += ", \"scheduling\": ";
        append_jgf(out, g, em, carry);
        if (carry) *carry = UnprintedSchedule{};
    }
    if (!em.queue.empty()) {
        out += ", \"attributes\": {\"system\": {\"scheduler\": {\"queue\": ";
        json::dump_string(out, em.queue);
        out += "}}}";
    }
    out += '}';
    return true;
}

}  // namespace

RFormat r_format(std::string_view name) {
    if (name == "simple") return RFormat::Simple;
    if (name == "pretty_simple") return RFormat::PrettySimple;
    if (name == "jgf") return RFormat::Jgf;
    if (name == "rlite") return RFormat::Rlite;
    if (name == "rv1") return RFormat::Rv1;
    if (name == "rv1_nosched") return RFormat::Rv1Nosched;
    throw InputError("unknown match format '" + std::string(name) +
                     "' (known: simple, pretty_simple, jgf, rlite, rv1, rv1_nosched)");
}

std::string write_r(const Graph &g, const Emission &em, RFormat format, UnprintedSchedule *carry) {
    if (format == RFormat::Simple) return write_simple(g, em, false);
    if (format == RFormat::PrettySimple) return write_simple(g, em, true);
    if (em.vertices.empty()) return "";
    std::string out;
    out.reserve(256);
    switch (format) {
        case RFormat::Jgf:
            append_jgf(out, g, em);
            break;
        case RFormat::Rlite:
            append_rlite(out, g, em);
            break;
        default:
            if (!append_rv1(out, g, em, format == RFormat::Rv1, carry)) {
                if (carry && format == RFormat::Rv1) keep_unprinted(*carry, g, em);
                return "";
            }
            break;
    }
    out += '\n';
    return out;
}

}  // namespace fluxion
