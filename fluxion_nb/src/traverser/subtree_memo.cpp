// The memo store (see subtree_memo.hpp), and the traverser's walk through it:
// a hit replays a memo's outputs into the walk's state, a miss records them.
#include "traverser/subtree_memo.hpp"

#include "traverser/traverser.hpp"

namespace fluxion {

namespace {
// Descendants a vertex needs before its walks are remembered.
constexpr size_t kMemoMinDescendants = 16;
}  // namespace

void SubtreeMemos::resize(const Graph &g, bool shared) {
    invalidate();
    size_t n = g.vertices.size();
    version_.assign(n, 0);
    memos_.clear();
    memos_.resize(n);
    big_.assign(n, 0);
    if (shared || g.root < 0) return;
    // Descendant counts, children before parents (the tree is walked once).
    std::vector<size_t> below(n, 0);
    std::vector<std::pair<int, size_t>> stack{{g.root, 0}};
    while (!stack.empty()) {
        auto &[v, i] = stack.back();
        const auto &out = g.vertices[static_cast<size_t>(v)].out_edges;
        if (i < out.size()) {
            int t = g.edges[static_cast<size_t>(out[i++])].target;
            stack.emplace_back(t, 0);
            continue;
        }
        int done = v;
        stack.pop_back();
        if (!stack.empty()) below[static_cast<size_t>(stack.back().first)] += below[static_cast<size_t>(done)] + 1;
    }
    for (size_t v = 0; v < n; ++v) big_[v] = below[v] >= kMemoMinDescendants;
}

std::unique_ptr<SubtreeMemo> SubtreeMemos::start(int u, const MemoKey &key) {
    std::unique_ptr<SubtreeMemo> rec = std::move(memos_[static_cast<size_t>(u)]);
    if (rec) {
        rec->msg.clear();
        rec->stamps.clear();
        rec->merged = false;
        rec->scoring = Scoring();
    } else {
        rec = std::make_unique<SubtreeMemo>();
    }
    rec->key = key;
    rec->version = version_[static_cast<size_t>(u)];
    stamps_from_.push_back(stamp_log_.size());
    ++recording_;
    return rec;
}

void SubtreeMemos::finish(int u, std::unique_ptr<SubtreeMemo> rec) {
    --recording_;
    size_t from = stamps_from_.back();
    stamps_from_.pop_back();
    rec->stamps.assign(stamp_log_.begin() + static_cast<std::ptrdiff_t>(from), stamp_log_.end());
    if (recording_ == 0) stamp_log_.clear();
    memos_[static_cast<size_t>(u)] = std::move(rec);
}

void Traverser::apply_stamp(const EdgeStamp &s) {
    Edge &ed = E(s.edge);
    if (ed.seq == seq_ && V(ed.target).partial_pool && s.exclusive)
        ed.needs += s.needs;  // several slots cut from one pool
    else
        ed.needs = s.needs;
    ed.exclusive = static_cast<int>(s.exclusive);
    stamp(s.edge);
    memos_.log(s);
}

int Traverser::dom_dfv_memo(const JobMeta &m, int u, const std::vector<Resource> &rs, bool pristine, bool *excl,
                            Scoring &to_parent) {
    MemoKey key;
    key.config = memos_.config();
    key.spec = memos_.request();
    key.rs = &rs;
    key.at = m.at;
    key.now = m.now;
    key.duration = m.duration;
    key.multilevel = multilevel_scores_;
    key.alloc_type = m.alloc_type;
    key.pristine = pristine;
    key.excl = *excl;
    key.hidden = hidden_.active();
    if (const SubtreeMemo *hit = memos_.find(u, key)) {
        const SubtreeMemo &h = *hit;
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
    std::unique_ptr<SubtreeMemo> rec = memos_.start(u, key);
    MatchErr err_before = errno_;
    errno_ = MatchErr::Unset;
    size_t msg_before = err_msg_.size();
    unsigned pre_before = preorder_, post_before = postorder_;
    int64_t ml_before = multilevel_scores_;
    int rc = dom_dfv_walk(m, u, rs, pristine, excl, to_parent, rec.get());
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
    memos_.finish(u, std::move(rec));
    return rc;
}

}  // namespace fluxion
