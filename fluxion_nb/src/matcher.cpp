#include "matcher.hpp"

#include <limits>

#include <algorithm>
#include <chrono>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <unordered_map>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "util/errors.hpp"
#include "traverser/find.hpp"
#include "jobspec/jobspec.hpp"
#include "util/json.hpp"
#include "readers/rv1exec.hpp"
#include "graph/subsystems.hpp"
#include "writers/writers.hpp"

namespace fluxion {

Matcher::Matcher(std::string_view jgf, MatcherOptions opts) : opts_(std::move(opts)) {
    Policy p = Policy::from_name(opts_.policy);
    TraverserKind kind = traverser_kind(opts_.traverser);
    // Or-slots are cut from whole candidates only (flux-sched's rule).
    if (kind == TraverserKind::Flexible && !opts_.partial_pool_types.empty())
        throw InputError("partial pools are not supported by the flexible traverser");
    format_ = r_format(opts_.match_format);
    GraphOptions go;
    go.partial_pool_types = opts_.partial_pool_types;
    go.subsystem = match_subsystems(opts_.subsystems).front();
    g_ = std::make_unique<Graph>(go);
    g_->load_jgf(jgf);
    trav_ = std::make_unique<Traverser>(*g_, p, opts_.prune_filters);
    trav_->set_kind(kind);
    trav_->set_shortcuts(opts_.shortcuts, opts_.memos);
    trav_->initialize();
    // Placements into the fresh graph then find their planner states and
    // table blocks in memory; past the bound, memory grows as they arrive.
    reserve_scheduling_state(std::min(g_->vertices.size(), kReservedVertices));
#if defined(__GLIBC__)
    // The parsed JGF document is far larger than the graph built from it; hand
    // its freed pages back so a long-running process keeps only the graph.
    malloc_trim(0);
#endif
}

void Matcher::set_match_format(const std::string &f) {
    std::lock_guard<std::mutex> lk(mu_);
    format_ = r_format(f);
    opts_.match_format = f;
    unprinted_ = UnprintedSchedule{};
}

UnprintedSchedule *Matcher::carry_for(const std::string &format) const {
    return opts_.carry_unprinted_schedule && format.empty() ? &unprinted_ : nullptr;
}

int Matcher::vertex_at(const std::string &path) const {
    int v = g_->find_path(path);
    if (v < 0) throw NotFoundError("no vertex at path " + path);
    return v;
}

int Matcher::enclosing_node(int v) const {
    for (int p = v; p >= 0; p = g_->parent(p))
        if (g_->vertices[static_cast<size_t>(p)].type == g_->types.node) return p;
    return -1;
}

std::vector<AllocatedVertex> Matcher::describe(const std::vector<EmittedVertex> &emitted) const {
    std::lock_guard<std::mutex> lk(mu_);
    std::vector<AllocatedVertex> out;
    out.reserve(emitted.size());
    for (const auto &ev : emitted) {
        if (ev.vertex < 0 || static_cast<size_t>(ev.vertex) >= g_->vertices.size())
            throw InputError("describe: no vertex " + std::to_string(ev.vertex));
        const Vertex &v = g_->vertices[static_cast<size_t>(ev.vertex)];
        AllocatedVertex a{std::string(g_->some_path(ev.vertex)), g_->types.name(v.type), std::string(v.name), v.id, v.rank, ev.needs, ev.exclusive, "", v.properties.get()};
        if (int node = enclosing_node(ev.vertex); node >= 0)
            a.node = std::string(g_->vertices[static_cast<size_t>(node)].name);
        out.push_back(std::move(a));
    }
    return out;
}

Matcher::NodeHoldings Matcher::held_by_node(const std::vector<EmittedVertex> &emitted) const {
    std::lock_guard<std::mutex> lk(mu_);
    NodeHoldings out;
    std::unordered_map<int, size_t> slot_of;  // node vertex -> index in out
    for (const auto &ev : emitted) {
        if (ev.vertex < 0 || static_cast<size_t>(ev.vertex) >= g_->vertices.size())
            throw InputError("held_by_node: no vertex " + std::to_string(ev.vertex));
        const Vertex &v = g_->vertices[static_cast<size_t>(ev.vertex)];
        if (!ev.exclusive || v.type == g_->types.node) continue;
        int node = enclosing_node(ev.vertex);
        if (node < 0) continue;
        auto [it, fresh] = slot_of.emplace(node, out.size());
        if (fresh)
            out.emplace_back(std::string(g_->vertices[static_cast<size_t>(node)].name),
                             std::vector<std::pair<std::string, int64_t>>());
        auto &per_type = out[it->second].second;
        const std::string &type = g_->types.name(v.type);
        auto t = std::find_if(per_type.begin(), per_type.end(), [&](const auto &kv) { return kv.first == type; });
        if (t == per_type.end())
            per_type.emplace_back(type, ev.needs);
        else
            t->second += ev.needs;
    }
    return out;
}

Jobspec &Matcher::parse_cached(const std::string &jobspec_json) {
    for (auto &p : parsed_)
        if (p.first == jobspec_json) return *p.second;
    auto js = std::make_unique<Jobspec>(parse_jobspec_text(jobspec_json, g_->types, trav_->kind()));
    constexpr size_t kKept = 8;
    if (parsed_.size() >= kKept) parsed_.erase(parsed_.begin());
    parsed_.emplace_back(jobspec_json, std::move(js));
    return *parsed_.back().second;
}

MatchResult Matcher::match(const std::string &jobspec_json, const std::string &op_name,
                           std::optional<int64_t> jobid, const std::string &format, int64_t now) {
    std::lock_guard<std::mutex> lk(mu_);
    auto t0 = std::chrono::steady_clock::now();
    MatchResult r;
    const MatchOp op = match_op(op_name);
    const RFormat fmt = format.empty() ? format_ : r_format(format);
    int64_t id = jobid ? *jobid : counter_;
    if (auto known = jobs_.find(id); known != jobs_.end() && known->second.state != "CANCELED")
        throw StateError("job id " + std::to_string(id) + " is already in use");
    r.jobid = id;
    if (now < 0 || now >= g_->end())
        throw InputError("match: now " + std::to_string(now) + " lies outside the graph's time span (0 to " +
                         std::to_string(g_->end()) + ")");
    Jobspec &cached = parse_cached(jobspec_json);  // throws InputError
    // The flexible traverser settles xor_slot alternatives in the jobspec
    // itself, so it gets a copy; the simple one may keep the cached object.
    Jobspec scratch;
    Jobspec &js = trav_->kind() == TraverserKind::Flexible ? (scratch = cached) : cached;
    Emission em;
    int64_t at = now;
    MatchErr err = MatchErr::None;
    JobRecord *record = nullptr;  // this job's, once known
    bool ok = trav_->run(js, op, id, at, em, err);
    r.preorder = trav_->preorder_count();
    r.postorder = trav_->postorder_count();
    bool consumes = op != MatchOp::Satisfiability && op != MatchOp::WithoutAllocating &&
                    op != MatchOp::WithoutAllocatingFuture;
    if (!ok && err != MatchErr::Busy && err != MatchErr::Unsatisfiable) {
        r.status = "error";
        r.error = trav_->err_message().empty() ? "match failed" : trav_->err_message();
        last_err_ = r.error;
        return r;
    }
    if (op == MatchOp::Satisfiability) {
        r.status = ok ? "satisfiable" : "unsatisfiable";
    } else if (!ok) {
        r.status = err == MatchErr::Unsatisfiable ? "unsatisfiable" : "busy";
    } else {
        r.at = at;
        r.duration = em.expiration - em.starttime;
        r.R = write_r(*g_, em, fmt, carry_for(format));
        if (!consumes) {
            r.status = "matched";
        } else {
            r.status = at == now ? "allocated" : "reserved";
            JobRecord jr{id, at == now ? "ALLOCATED" : "RESERVED", at, r.duration, 0.0, r.R, {}};
            jr.vertices.reserve(em.vertices.size());
            for (const auto &ev : em.vertices) jr.vertices.push_back(ev.vertex);
            record = &jobs_.insert_or_assign(id, std::move(jr)).first->second;
        }
        r.emitted = std::move(em.vertices);
    }
    if (consumes && !jobid) advance_counter(counter_);
    if (consumes && jobid) advance_counter(*jobid);
    r.overhead = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!record) {
        auto it = jobs_.find(id);
        if (it != jobs_.end()) record = &it->second;
    }
    if (record) record->overhead = r.overhead;
    return r;
}

std::map<int, std::pair<int64_t, bool>> Matcher::read_r_amounts(const std::string &R) const {
    return read_r_amounts(json::parse(R));
}

namespace {
// The JGF graph an R carries (scheduling.graph, or a bare graph), or null.
const json::Value *r_graph(const json::Value &doc) {
    const json::Value *graph = nullptr;
    if (const json::Value *s = doc.find("scheduling")) graph = s->find("graph");
    if (!graph) graph = doc.find("graph");
    return graph;
}
}  // namespace

std::map<int, std::pair<int64_t, bool>> Matcher::read_r_amounts(const json::Value &doc) const {
    const json::Value *graph = r_graph(doc);
    if (!graph || !graph->is_object()) throw InputError("R: no JGF 'graph' (or 'scheduling.graph') in it");
    const json::Value *nodes = graph->find("nodes");
    if (!nodes || !nodes->is_array()) throw InputError("R: graph.nodes must be an array");
    std::map<int, std::pair<int64_t, bool>> out;
    for (const auto &n : nodes->items()) {
        const json::Value *md = n.find("metadata");
        if (!md || !md->is_object()) throw InputError("R: a vertex has no metadata");
        const json::Value *paths = md->find("paths");
        // Vertices are named by their path in the dominant subsystem.
        const std::string &dom = g_->subsystem();
        const json::Value *cp = paths ? paths->find(dom) : nullptr;
        if (!cp || !cp->is_string()) throw InputError("R: a vertex has no " + dom + " path");
        int v = g_->find_path(cp->as_string());
        if (v < 0) throw NotFoundError("R: no vertex at path " + cp->as_string());
        // A rank that disagrees with the graph means R describes another vertex.
        if (const json::Value *rk = md->find("rank"); rk && rk->is_int()) {
            int64_t have = g_->vertices[static_cast<size_t>(v)].rank;
            if (rk->as_int() != have)
                throw InputError("R: vertex at " + cp->as_string() + " has rank " + std::to_string(rk->as_int()) +
                                 ", the graph says " + std::to_string(have));
        }
        int64_t size = 1;
        if (const json::Value *s = md->find("size"); s && s->is_int()) size = s->as_int();
        if (size < 0)
            throw InputError("R: vertex at " + cp->as_string() + " has a negative size (" + std::to_string(size) +
                             "); sizes must be 0 or more");
        bool excl = false;
        if (const json::Value *x = md->find("exclusive"); x && x->is_bool()) excl = x->as_bool();
        out[v] = {size, excl};
    }
    return out;
}

void Matcher::check_new_job(int64_t jobid, int64_t at, int64_t duration, const char *op) const {
    if (jobs_.count(jobid) && jobs_.at(jobid).state != "CANCELED")
        throw StateError("job id " + std::to_string(jobid) + " is already in use");
    // at > end - duration, not at + duration > end: the sum can overflow.
    if (at < 0 || duration <= 0 || at > g_->end() || duration > g_->end() - at)
        throw InputError(std::string(op) + ": invalid time (at " + std::to_string(at) + ", duration " +
                         std::to_string(duration) +
                         "): need at >= 0, duration > 0 and at + duration within the graph's time span (ends at " +
                         std::to_string(g_->end()) + ")");
}

void Matcher::hold(int64_t jobid, const std::vector<std::pair<std::string, int64_t>> &holdings, int64_t at,
                   int64_t duration) {
    std::lock_guard<std::mutex> lk(mu_);
    check_new_job(jobid, at, duration, "hold");
    if (holdings.empty()) throw InputError("hold: nothing to hold");
    std::map<int, std::pair<int64_t, bool>> amounts;
    std::vector<int> held;
    held.reserve(holdings.size());
    for (const auto &[path, amount] : holdings) {
        int v = vertex_at(path);
        if (amount <= 0)
            throw InputError("hold: amount for " + path + " must be positive, not " + std::to_string(amount));
        if (!amounts.emplace(v, std::make_pair(amount, true)).second)
            throw InputError("hold: " + path + " is named twice");
        held.push_back(v);
    }
    // The ancestors go along as an R would list them: one unit, shared.
    for (int v : held)
        for (int a = g_->parent(v); a >= 0; a = g_->parent(a))
            if (!amounts.emplace(a, std::make_pair(int64_t{1}, false)).second) break;
    Emission em;
    std::string why;
    if (!trav_->replay(jobid, at, duration, false, amounts, em, why)) throw StateError("hold: " + why);
    JobRecord jr{jobid, "ALLOCATED", at, duration, 0.0, "", {}};
    for (const auto &ev : em.vertices) jr.vertices.push_back(ev.vertex);
    jobs_[jobid] = std::move(jr);
    advance_counter(jobid);
}

MatchResult Matcher::update_allocate(int64_t jobid, const std::string &R, int64_t at, int64_t duration,
                                     bool reserve, const std::string &format, const std::string &reader,
                                     int64_t now) {
    if (reader != "" && reader != "jgf" && reader != "jgf_shorthand" && reader != "rv1exec")
        throw InputError("update: R reader must be jgf, jgf_shorthand or rv1exec, not '" + reader + "'");
    std::lock_guard<std::mutex> lk(mu_);
    check_new_job(jobid, at, duration, "update");
    const RFormat fmt = format.empty() ? format_ : r_format(format);
    std::map<int, std::pair<int64_t, bool>> amounts;
    std::vector<int> unplanned;
    bool rv1exec = reader == "rv1exec";
    if (!rv1exec) {
        json::Value doc = json::parse(R);
        // Told nothing: an R without JGF is read for its R_lite.
        if (reader.empty() && doc.is_object() && !r_graph(doc) && doc.find("execution"))
            rv1exec = true;
        else
            amounts = read_r_amounts(doc);
    }
    if (rv1exec) {
        Rv1Holdings held = rv1exec_holdings(*g_, R);
        amounts = std::move(held.amounts);
        unplanned = std::move(held.unplanned);
    }
    Emission em;
    std::string why;
    MatchResult r;
    r.jobid = jobid;
    if (!trav_->replay(jobid, at, duration, reserve, amounts, em, why, &unplanned, true))
        throw StateError("update: " + why);
    const bool later = reserve || at > now;
    r.status = later ? "reserved" : "allocated";
    r.at = at;
    r.duration = duration;
    r.R = write_r(*g_, em, fmt, carry_for(format));
    r.emitted = em.vertices;
    JobRecord jr{jobid, later ? "RESERVED" : "ALLOCATED", at, duration, 0.0, r.R, {}};
    for (const auto &ev : em.vertices) jr.vertices.push_back(ev.vertex);
    jobs_[jobid] = std::move(jr);
    advance_counter(jobid);
    return r;
}

void Matcher::advance_counter(int64_t used) {
    // The next automatic id follows the highest one used; at INT64_MAX it stays,
    // and a match that would reuse it fails as "already in use".
    if (used >= counter_ && used < std::numeric_limits<int64_t>::max()) counter_ = used + 1;
}

void Matcher::finish(std::map<int64_t, JobRecord>::iterator it) {
    if (opts_.keep_canceled)
        it->second.state = "CANCELED";
    else
        jobs_.erase(it);
}

bool Matcher::cancel(int64_t jobid, bool noent_ok) {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = jobs_.find(jobid);
    if (it == jobs_.end() || it->second.state == "CANCELED") {
        if (noent_ok) return false;
        throw NotFoundError("nonexistent job " + std::to_string(jobid));
    }
    trav_->cancel(jobid, &it->second.vertices);
    finish(it);
    return true;
}

std::map<int64_t, JobRecord>::iterator Matcher::partly_cancelable(int64_t jobid) {
    auto it = jobs_.find(jobid);
    if (it == jobs_.end() || it->second.state == "CANCELED")
        throw NotFoundError("nonexistent job " + std::to_string(jobid));
    if (it->second.state == "RESERVED") throw StateError("partial cancel of a reservation is not supported");
    trav_->settle();
    return it;
}

bool Matcher::release_part(std::map<int64_t, JobRecord>::iterator it, const std::vector<int> &release) {
    bool full = false;
    trav_->partial_cancel(it->first, release, full);
    if (full) finish(it);
    return full;
}

bool Matcher::partial_cancel(int64_t jobid, const std::vector<std::string> &paths) {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = partly_cancelable(jobid);
    std::vector<int> release;
    for (const auto &p : paths) {
        int v = vertex_at(p);
        std::vector<int> sub;
        g_->subtree(v, sub);
        release.insert(release.end(), sub.begin(), sub.end());
    }
    return release_part(it, release);
}

bool Matcher::partial_cancel_r(int64_t jobid, const std::string &R, const std::string &format) {
    if (format != "jgf" && format != "rv1exec")
        throw InputError("partial cancel: R format must be jgf or rv1exec, not '" + format + "'");
    std::lock_guard<std::mutex> lk(mu_);
    auto it = partly_cancelable(jobid);
    return release_part(it, format == "rv1exec" ? rank_holdings(jobid, R) : named_holdings(jobid, R));
}

std::vector<int> Matcher::named_holdings(int64_t jobid, const std::string &R) const {
    // flux-sched releases exactly the vertices R names, each holding of the
    // job on its own. A named vertex is only released together with every
    // vertex under it that still holds the job: releasing an ancestor alone
    // (a node, rack or cluster above what the job holds) would cut the
    // job's tags off above holdings that stay planned, and they could then
    // never be cancelled. Such vertices are left as they are.
    std::set<int> named;
    for (auto &kv : read_r_amounts(R)) named.insert(kv.first);
    std::map<int, bool> whole;  // named vertex -> its held subtree is all named
    std::function<bool(int)> covered = [&](int v) -> bool {
        if (auto w = whole.find(v); w != whole.end()) return w->second;
        bool ok = named.count(v) > 0;
        if (ok)
            for (int e : g_->vertices[static_cast<size_t>(v)].out_edges) {
                int t = g_->edges[static_cast<size_t>(e)].target;
                if (g_->vertices[static_cast<size_t>(t)].tags.count(jobid) && !covered(t)) {
                    ok = false;
                    break;
                }
            }
        whole[v] = ok;
        return ok;
    };
    std::vector<int> release;
    for (int v : named)
        if (g_->vertices[static_cast<size_t>(v)].tags.count(jobid) && covered(v)) release.push_back(v);
    return release;
}

std::vector<int> Matcher::rank_holdings(int64_t jobid, const std::string &R) const {
    // As flux-sched's rv1exec reader: every vertex of a listed rank that
    // holds the job. A rank the graph lacks, or where the job holds nothing,
    // is an error, found before anything is released.
    std::set<int64_t> ranks = r_lite_ranks(R);
    std::map<int64_t, std::vector<int>> held;  // rank -> its vertices holding the job
    std::set<int64_t> present;
    for (size_t i = 0; i < g_->vertices.size(); ++i) {
        const Vertex &v = g_->vertices[i];
        if (v.removed || !ranks.count(v.rank)) continue;
        present.insert(v.rank);
        if (v.tags.count(jobid)) held[v.rank].push_back(static_cast<int>(i));
    }
    std::vector<int> release;
    for (int64_t r : ranks) {
        if (!present.count(r)) throw NotFoundError("R: no vertex of rank " + std::to_string(r));
        auto h = held.find(r);
        if (h == held.end())
            throw InputError("R: job " + std::to_string(jobid) + " holds nothing on rank " + std::to_string(r));
        release.insert(release.end(), h->second.begin(), h->second.end());
    }
    return release;
}

std::optional<JobRecord> Matcher::info(int64_t jobid) const {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = jobs_.find(jobid);
    if (it == jobs_.end()) return std::nullopt;
    return it->second;
}

std::vector<JobRecord> Matcher::jobs() const {
    std::lock_guard<std::mutex> lk(mu_);
    std::vector<JobRecord> out;
    for (const auto &kv : jobs_) out.push_back(kv.second);
    return out;
}

GraphStats Matcher::stat() const {
    std::lock_guard<std::mutex> lk(mu_);
    GraphStats s;
    for (const auto &v : g_->vertices) s.vertices += v.removed ? 0 : 1;
    for (const auto &e : g_->edges) s.edges += e.removed ? 0 : 1;
    for (const auto &kv : jobs_) s.jobs += kv.second.state != "CANCELED";
    return s;
}

int64_t Matcher::next_jobid() const {
    std::lock_guard<std::mutex> lk(mu_);
    return counter_;
}

void Matcher::set_next_jobid(int64_t id) {
    std::lock_guard<std::mutex> lk(mu_);
    counter_ = id;
}

void Matcher::set_status(const std::string &path, bool up) {
    std::lock_guard<std::mutex> lk(mu_);
    g_->set_status(vertex_at(path), up ? Status::Up : Status::Down);
    trav_->invalidate_memos();
}

bool Matcher::get_status(const std::string &path) const {
    std::lock_guard<std::mutex> lk(mu_);
    return g_->vertices[static_cast<size_t>(vertex_at(path))].status == Status::Up;
}

void Matcher::set_property(const std::string &path, const std::string &key, const std::string &value) {
    std::lock_guard<std::mutex> lk(mu_);
    if (key.empty()) throw InputError("set-property: empty property name");
    g_->vertices[static_cast<size_t>(vertex_at(path))].properties[key] = value;
    trav_->invalidate_memos();
}

std::map<std::string, std::string> Matcher::get_property(const std::string &path) const {
    std::lock_guard<std::mutex> lk(mu_);
    return g_->vertices[static_cast<size_t>(vertex_at(path))].properties.get();
}

int64_t Matcher::uniq_id(const std::string &path) const {
    std::lock_guard<std::mutex> lk(mu_);
    return g_->vertices[static_cast<size_t>(vertex_at(path))].uniq_id;
}

void Matcher::attach(const std::string &jgf) {
    std::lock_guard<std::mutex> lk(mu_);
    trav_->settle();
    parsed_.clear();  // type names may gain ids
    g_->attach_jgf(jgf);
    trav_->initialize();
}

void Matcher::remove(const std::string &path) {
    std::lock_guard<std::mutex> lk(mu_);
    trav_->settle();
    int v = vertex_at(path);
    std::vector<int> sub;
    g_->subtree(v, sub);
    std::set<int64_t> held;
    for (int x : sub) {
        const Vertex &vx = g_->vertices[static_cast<size_t>(x)];
        if (!vx.reservations.empty())
            throw StateError("remove: " + std::string(g_->some_path(x)) + " holds a reservation; cancel it first");
        for (const auto &kv : vx.allocations) held.insert(kv.first);
    }
    // Jobs running on the removed part keep the rest of their allocation;
    // what they held there no longer counts in the ancestors' aggregates.
    for (int64_t jobid : held) {
        bool full = false;
        trav_->partial_cancel(jobid, sub, full);
    }
    g_->detach_subtree(v);
    // Aggregate totals above the removed subtree shrink; spans are kept.
    trav_->initialize();
}

void Matcher::remove_ranks(const std::string &idset) {
    std::vector<std::string> roots;
    {
        std::lock_guard<std::mutex> lk(mu_);
        for (int64_t r : parse_idset(idset)) {
            // A rank's vertices form a subtree of the dominant subsystem; its
            // root has the shortest path there.
            int best = -1;
            std::string_view best_path;
            for (size_t i = 0; i < g_->vertices.size(); ++i) {
                const Vertex &v = g_->vertices[i];
                if (v.removed || v.rank != r) continue;
                std::string_view p = g_->path_in(static_cast<int>(i), g_->subsystem());
                if (p.empty()) continue;
                if (best < 0 || p.size() < best_path.size()) {
                    best = static_cast<int>(i);
                    best_path = p;
                }
            }
            if (best < 0) throw NotFoundError("no vertex of rank " + std::to_string(r));
            roots.push_back(std::string(best_path));
        }
    }
    for (const auto &p : roots) remove(p);
}

std::string Matcher::find(const std::string &criteria, const std::string &format) const {
    FindCriteria c = FindCriteria::parse(criteria);
    std::lock_guard<std::mutex> lk(mu_);
    const RFormat fmt = format.empty() ? format_ : r_format(format);
    trav_->settle();
    return write_r(*g_, find_vertices(*g_, c), fmt, carry_for(format));
}

std::pair<unsigned, unsigned> Matcher::traversal_counts() const {
    std::lock_guard<std::mutex> lk(mu_);
    return {trav_->preorder_count(), trav_->postorder_count()};
}

std::vector<Matcher::Usage> Matcher::usage(int64_t at) const {
    std::lock_guard<std::mutex> lk(mu_);
    trav_->settle();
    std::vector<Usage> out;
    for (size_t i = 0; i < g_->vertices.size(); ++i) {
        const Vertex &v = g_->vertices[i];
        if (v.removed) continue;
        int64_t free_now = v.plans.avail_at(at);
        out.push_back({std::string(g_->some_path(static_cast<int>(i))), g_->types.name(v.type), std::string(v.name), v.size, v.size - (free_now < 0 ? 0 : free_now)});
    }
    return out;
}

uint64_t Matcher::memo_hits() const {
    std::lock_guard<std::mutex> lk(mu_);
    return trav_->memo_hits();
}

}  // namespace fluxion
