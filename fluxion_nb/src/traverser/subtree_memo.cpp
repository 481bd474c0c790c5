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
#include "traverser/traverser.hpp"

namespace fluxion {

namespace {
// Descendants a vertex needs before its walks are remembered.
constexpr size_t kMemoMinDescendants = 16;
}  // namespace

void Traverser::size_memos() {
    invalidate_memos();
    size_t n = g_.vertices.size();
    version_.assign(n, 0);
    memo_.clear();
    memo_.resize(n);
    memo_big_.assign(n, 0);
    if (shared_ || g_.root < 0) return;
    // Descendant counts, children before parents (the tree is walked once).
    std::vector<size_t> below(n, 0);
    std::vector<std::pair<int, size_t>> stack{{g_.root, 0}};
    while (!stack.empty()) {
        auto &[v, i] = stack.back();
        const auto &out = V(v).out_edges;
        if (i < out.size()) {
            int t = E(out[i++]).target;
            stack.emplace_back(t, 0);
            continue;
        }
        int done = v;
        stack.pop_back();
        if (!stack.empty()) below[static_cast<size_t>(stack.back().first)] += below[static_cast<size_t>(done)] + 1;
    }
    for (size_t v = 0; v < n; ++v) memo_big_[v] = below[v] >= kMemoMinDescendants;
}

void Traverser::touch_up(int v) {
    for (int a = v; a >= 0; a = g_.parent(a)) touch(a);
}

void Traverser::apply_stamp(const EdgeStamp &s) {
    Edge &ed = E(s.edge);
    if (ed.seq == seq_ && V(ed.target).partial_pool && s.exclusive)
        ed.needs += s.needs;  // several slots cut from one pool
    else
        ed.needs = s.needs;
    ed.exclusive = static_cast<int>(s.exclusive);
    stamp(s.edge);
    if (recording_ > 0) stamp_log_.push_back(s);
}

int Traverser::dom_dfv_memo(const JobMeta &m, int u, const std::vector<Resource> &rs, bool pristine, bool *excl,
                            Scoring &to_parent) {
    MemoKey key;
    key.config = config_epoch_;
    key.spec = spec_serial_;
    key.rs = &rs;
    key.at = m.at;
    key.now = m.now;
    key.duration = m.duration;
    key.multilevel = multilevel_scores_;
    key.alloc_type = m.alloc_type;
    key.pristine = pristine;
    key.excl = *excl;
    key.hidden = hidden_prune_;
    auto &slot = memo_[static_cast<size_t>(u)];
    uint64_t version = version_[static_cast<size_t>(u)];
    if (slot && slot->version == version && slot->key == key && key.spec != 0) {
        const SubtreeMemo &h = *slot;
        ++memo_hits_;
        if (h.err_set) errno_ = h.err;
        err_msg_ += h.msg;
        preorder_ += h.pre;
        postorder_ += h.post;
        multilevel_scores_ += h.multilevel_delta;
        node_factor_ = h.node_factor;
        *excl = h.excl_out;
        for (const EdgeStamp &s : h.stamps) apply_stamp(s);
        if (h.rc == 0) {
            if (h.merged) to_parent.merge(Scoring(h.scoring));
            to_parent.avail = h.avail;
            to_parent.overall_score = h.overall;
        }
        return h.rc;
    }
    // Record a fresh walk (in the vertex's old memo, if any: fewer allocations).
    std::unique_ptr<SubtreeMemo> rec = std::move(slot);
    if (rec) {
        rec->msg.clear();
        rec->stamps.clear();
        rec->merged = false;
        rec->scoring = Scoring();
    } else {
        rec = std::make_unique<SubtreeMemo>();
    }
    rec->key = key;
    rec->version = version;
    MatchErr err_before = errno_;
    errno_ = MatchErr::Unset;
    size_t msg_before = err_msg_.size();
    unsigned pre_before = preorder_, post_before = postorder_;
    int64_t ml_before = multilevel_scores_;
    size_t stamps_before = stamp_log_.size();
    ++recording_;
    int rc = dom_dfv_walk(m, u, rs, pristine, excl, to_parent, rec.get());
    --recording_;
    rec->rc = rc;
    rec->err_set = errno_ != MatchErr::Unset;
    rec->err = errno_;
    if (!rec->err_set) errno_ = err_before;
    if (err_msg_.size() > msg_before) rec->msg.assign(err_msg_, msg_before, std::string::npos);
    rec->pre = preorder_ - pre_before;
    rec->post = postorder_ - post_before;
    rec->multilevel_delta = multilevel_scores_ - ml_before;
    rec->node_factor = node_factor_;
    rec->excl_out = *excl;
    if (rc == 0) {
        rec->avail = to_parent.avail;
        rec->overall = to_parent.overall_score;
    }
    rec->stamps.assign(stamp_log_.begin() + static_cast<std::ptrdiff_t>(stamps_before), stamp_log_.end());
    if (recording_ == 0) stamp_log_.clear();
    // A change during the walk itself (deferred bookkeeping applied below)
    // leaves the version raised: the memo is then simply not used.
    slot = std::move(rec);
    return rc;
}

}  // namespace fluxion
