// Subtree memos: what a walk below a vertex answered, kept for the next walk
// that asks the same question.
//
// The scoring policies (low, high, lonode, ...) look at every candidate of
// the graph on every match, because their choice is a sort over all of them.
// Between two matches almost every subtree is unchanged, so its walk would
// give the same candidates, scores, messages and edge marks as the last time.
// A memo records those outputs for one vertex, keyed by everything the walk
// reads from outside the subtree (the request, the time window, the flags the
// parent passes down); a version per vertex, raised by every change at or
// below it, says whether the subtree is still as it was. A memo hit replays
// the outputs instead of walking: the match is the same, only faster.
//
// Changes come from the update walk (allocations, reservations, replays and
// deferred bookkeeping all run upd_dfv), the cancel walk, partial cancels,
// and direct edits (status, properties, grow and shrink), which invalidate
// every memo at once. Memos are kept on vertices with a subtree large enough
// to pay for the bookkeeping, only for the policies that look at every
// candidate (first-match walks are short: recording would cost more than it
// saves), and only on trees walked by the simple traverser with the
// shortcuts on.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "graph/graph.hpp"
#include "traverser/job.hpp"
#include "traverser/scoring.hpp"

namespace fluxion {

// Everything a subtree walk reads from outside the subtree.
struct MemoKey {
    uint64_t config = 0;  // the store's epoch: policy, kind, direct edits
    uint64_t spec = 0;    // the request's serial
    const void *rs = nullptr;
    int64_t at = 0, now = 0, duration = 0, multilevel = 0;
    AllocType alloc_type = AllocType::Alloc;
    bool pristine = false, excl = false, hidden = false;
    bool operator==(const MemoKey &o) const {
        return config == o.config && spec == o.spec && rs == o.rs && at == o.at && now == o.now &&
               duration == o.duration && multilevel == o.multilevel && alloc_type == o.alloc_type &&
               pristine == o.pristine && excl == o.excl && hidden == o.hidden;
    }
};

// A mark the walk left on an edge (what the update walk will follow).
struct EdgeStamp {
    int edge;
    uint64_t needs;
    unsigned exclusive;
};

// The outputs of one walk below a vertex.
struct SubtreeMemo {
    MemoKey key;
    uint64_t version = 0;
    int rc = -1;
    bool err_set = false;
    MatchErr err = MatchErr::None;
    std::string msg;
    unsigned pre = 0, post = 0;
    int64_t multilevel_delta = 0;
    int64_t node_factor = 0;
    bool excl_out = false;
    unsigned avail = 0;
    int64_t overall = 0;
    bool merged = false;
    Scoring scoring;
    std::vector<EdgeStamp> stamps;
};

// The memos of one graph, a version per vertex, and the stamps of the walks
// being recorded.
class SubtreeMemos {
   public:
    // Size the tables for `g` (after load or any change to its shape) and
    // choose the vertices worth remembering; none when `shared` (not a tree).
    // Forgets every memo.
    void resize(const Graph &g, bool shared);
    void set_enabled(bool on) { enabled_ = on; }
    bool enabled() const { return enabled_; }
    // Forget every memo at once: changes made to vertices directly.
    void invalidate() { ++config_; }
    uint64_t config() const { return config_; }
    // The request every following walk answers (its serial; 0: never remembered).
    void set_request(uint64_t serial) { request_ = serial; }
    uint64_t request() const { return request_; }
    // Whether walks below `u` are remembered.
    bool worth(int u) const {
        return static_cast<size_t>(u) < big_.size() && big_[static_cast<size_t>(u)];
    }

    // A change at v: v differs from any memo of it.
    void touch(int v) {
        if (static_cast<size_t>(v) < version_.size()) version_[static_cast<size_t>(v)] = ++clock_;
    }
    // A change at v seen from above: v and every ancestor differ.
    void touch_up(const Graph &g, int v) {
        for (int a = v; a >= 0; a = g.parent(a)) touch(a);
    }

    // u's memo if it answers `key` as u is now (a hit, counted), else null.
    const SubtreeMemo *find(int u, const MemoKey &key) {
        const auto &slot = memos_[static_cast<size_t>(u)];
        if (!slot || slot->version != version_[static_cast<size_t>(u)] || !(slot->key == key) || key.spec == 0)
            return nullptr;
        ++hits_;
        return slot.get();
    }
    // Start recording a walk below u for `key`; stamps made until finish()
    // are its own. Reuses u's old memo (fewer allocations).
    std::unique_ptr<SubtreeMemo> start(int u, const MemoKey &key);
    // The walk is over: keep what it stamped and the memo. A change during the
    // walk itself (deferred bookkeeping applied below) left the version raised:
    // the memo is then simply not used.
    void finish(int u, std::unique_ptr<SubtreeMemo> rec);
    // A stamp the walk made: kept while any walk is being recorded.
    void log(const EdgeStamp &s) {
        if (recording_ > 0) stamp_log_.push_back(s);
    }
    uint64_t hits() const { return hits_; }

   private:
    bool enabled_ = true;
    uint64_t config_ = 1;
    uint64_t clock_ = 1;
    uint64_t request_ = 0;
    uint64_t hits_ = 0;
    std::vector<uint64_t> version_;                    // per vertex: last change at or below it
    std::vector<std::unique_ptr<SubtreeMemo>> memos_;  // per vertex: its last walk
    std::vector<char> big_;                            // per vertex: worth remembering
    std::vector<EdgeStamp> stamp_log_;                 // stamps made while recording
    std::vector<size_t> stamps_from_;                  // per walk being recorded: its first stamp
    int recording_ = 0;
};

}  // namespace fluxion
