#include "writers.hpp"

#include <algorithm>
#include <set>

#include "errors.hpp"
#include "jobspec.hpp"
#include "json.hpp"

namespace fluxion {

namespace {

std::string prefix(int level) {
    std::string p = "      ";
    for (int i = 0; i < level; ++i) p += "---";
    return p;
}

std::string write_simple(const Graph &g, const Emission &em, bool pretty) {
    std::string out;
    auto line = [&](const EmittedVertex &ev) {
        const Vertex &v = g.vertices[static_cast<size_t>(ev.vertex)];
        out += prefix(ev.level) + std::string(v.name) + "[" + std::to_string(ev.needs) + ":" +
               (pretty ? (ev.exclusive ? "exclusive" : "shared") : (ev.exclusive ? "x" : "s")) + "]\n";
    };
    if (pretty)
        for (auto it = em.vertices.rbegin(); it != em.vertices.rend(); ++it) line(*it);
    else
        for (const auto &ev : em.vertices) line(ev);
    return out;
}

json::Value jgf_value(const Graph &g, const Emission &em) {
    json::Value nodes = json::Value::make_array();
    for (const auto &ev : em.vertices) {
        const Vertex &v = g.vertices[static_cast<size_t>(ev.vertex)];
        const std::string &tname = g.types.name(v.type);
        json::Value md = json::Value::make_object();
        md.set("type", json::Value::make_string(tname));
        if (v.basename != tname) md.set("basename", json::Value::make_string(std::string(v.basename)));
        if (v.name != std::string(v.basename) + std::to_string(v.id))
            md.set("name", json::Value::make_string(std::string(v.name)));
        md.set("id", json::Value::make_int(v.id));
        md.set("rank", json::Value::make_int(v.rank));
        if (!v.properties.empty()) {
            json::Value p = json::Value::make_object();
            for (const auto &kv : v.properties) p.set(kv.first, json::Value::make_string(kv.second));
            md.set("properties", p);
        }
        // No "unit": flux-sched's JGF reader drops it, so its R never carries one.
        if (ev.exclusive) md.set("exclusive", json::Value::make_bool(true));
        if (ev.needs != 1) md.set("size", json::Value::make_int(ev.needs));
        json::Value paths = json::Value::make_object();
        for (const std::string &ss : g.subsystems)
            if (std::string_view p = g.path_in(ev.vertex, ss); !p.empty())
                paths.set(ss, json::Value::make_string(std::string(p)));
        md.set("paths", paths);
        auto af = em.agfilter.find(ev.vertex);
        if (af != em.agfilter.end()) {
            json::Value a = json::Value::make_object();
            for (const auto &kv : af->second) a.set(kv.first, json::Value::make_string(kv.second));
            md.set("agfilter", a);
        }
        json::Value n = json::Value::make_object();
        n.set("id", json::Value::make_string(std::to_string(v.uniq_id)));
        n.set("metadata", md);
        nodes.push(n);
    }
    json::Value edges = json::Value::make_array();
    for (int e : em.edges) {
        const Edge &ed = g.edges[static_cast<size_t>(e)];
        json::Value o = json::Value::make_object();
        o.set("source", json::Value::make_string(
                            std::to_string(g.vertices[static_cast<size_t>(ed.source)].uniq_id)));
        o.set("target", json::Value::make_string(
                            std::to_string(g.vertices[static_cast<size_t>(ed.target)].uniq_id)));
        if (g.subsystem() != "containment") {
            json::Value m = json::Value::make_object();
            m.set("subsystem", json::Value::make_string(g.subsystem()));
            o.set("metadata", m);
        }
        edges.push(o);
    }
    json::Value graph = json::Value::make_object();
    graph.set("nodes", nodes);
    graph.set("edges", edges);
    json::Value doc = json::Value::make_object();
    doc.set("graph", graph);
    return doc;
}

// R_lite: core and gpu ids gathered per node (and storage node), nodes with
// the same children merged into one rank set. Written straight into the
// output (json::dump's spacing) rather than through a json::Value tree: a
// small match's R is otherwise a good part of its cost.
void append_rlite(std::string &out, const Graph &g, const Emission &em) {
    // Reducer types in type order, each with its ids since the last node
    // (sorted and deduplicated there).
    std::pair<int, std::vector<int64_t>> pending[2] = {{std::min(g.types.core, g.types.gpu), {}},
                                                       {std::max(g.types.core, g.types.gpu), {}}};
    struct Group {
        std::string sig;  // the children, as written
        std::set<int64_t> ranks;
    };
    std::vector<Group> groups;
    std::string sig;
    for (const auto &ev : em.vertices) {
        const Vertex &v = g.vertices[static_cast<size_t>(ev.vertex)];
        if (v.type == pending[0].first || v.type == pending[1].first) {
            pending[v.type == pending[0].first ? 0 : 1].second.push_back(v.id);
        } else if (v.type == g.types.node || v.type == g.types.storage_node) {
            sig.clear();
            sig += '{';
            for (auto &kv : pending) {
                std::vector<int64_t> &ids = kv.second;
                if (ids.empty()) continue;
                if (!std::is_sorted(ids.begin(), ids.end())) std::sort(ids.begin(), ids.end());
                ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
                if (sig.size() > 1) sig += ", ";
                json::dump_string(sig, g.types.name(kv.first));
                sig += ": ";
                json::dump_string(sig, format_sorted_idset(ids));
                ids.clear();
            }
            sig += '}';
            auto grp = std::find_if(groups.begin(), groups.end(), [&](const Group &x) { return x.sig == sig; });
            if (grp != groups.end())
                grp->ranks.insert(v.rank);
            else
                groups.push_back(Group{sig, {v.rank}});
        }
    }
    out += '[';
    for (size_t k = 0; k < groups.size(); ++k) {
        if (k) out += ", ";
        out += "{\"rank\": ";
        json::dump_string(out, format_idset(groups[k].ranks));
        out += ", \"children\": ";
        out += groups[k].sig;
        out += '}';
    }
    out += ']';
}

void append_rv1(std::string &out, const Graph &g, const Emission &em, bool sched) {
    out += "{\"version\": 1, \"execution\": {\"R_lite\": ";
    append_rlite(out, g, em);
    // Node names in rank order, compressed as a host list.
    std::vector<std::pair<int64_t, std::string>> ranked;
    for (const auto &ev : em.vertices) {
        const Vertex &v = g.vertices[static_cast<size_t>(ev.vertex)];
        if (v.type == g.types.node || v.type == g.types.storage_node) ranked.emplace_back(v.rank, std::string(v.name));
    }
    std::stable_sort(ranked.begin(), ranked.end());
    out += ", \"nodelist\": [";
    if (!ranked.empty()) {
        std::vector<std::string> names;
        names.reserve(ranked.size());
        for (auto &r : ranked) names.push_back(std::move(r.second));
        json::dump_string(out, compress_hostlist(names));
    }
    out += "], \"starttime\": " + std::to_string(em.starttime) +
           ", \"expiration\": " + std::to_string(em.expiration) + '}';
    if (sched) {
        out += ", \"scheduling\": ";
        out += json::dump(jgf_value(g, em));
    }
    if (!em.queue.empty()) {
        out += ", \"attributes\": {\"system\": {\"scheduler\": {\"queue\": ";
        json::dump_string(out, em.queue);
        out += "}}}";
    }
    out += '}';
}

}  // namespace

bool known_format(const std::string &f) {
    return f == "simple" || f == "pretty_simple" || f == "jgf" || f == "rlite" || f == "rv1" ||
           f == "rv1_nosched";
}

std::string write_r(const Graph &g, const Emission &em, const std::string &format) {
    if (format == "simple") return write_simple(g, em, false);
    if (format == "pretty_simple") return write_simple(g, em, true);
    if (em.vertices.empty()) return "";
    if (format == "jgf") return json::dump(jgf_value(g, em)) + "\n";
    std::string out;
    if (format == "rlite") {
        append_rlite(out, g, em);
    } else if (format == "rv1" || format == "rv1_nosched") {
        append_rv1(out, g, em, format == "rv1");
    } else {
        throw InputError("unknown match format '" + format +
                         "' (known: simple, pretty_simple, jgf, rlite, rv1, rv1_nosched)");
    }
    return out + "\n";
}

}  // namespace fluxion
