// Wide-vertex edge lists: the out-edges of a wide vertex a search chose.
//
// A cluster vertex may have thousands of node edges. After a match, the
// update walk follows only the edges the search stamped, and finding them by
// reading every out-edge's stamp costs a cache miss per edge. Stamps on edges
// out of a wide vertex are therefore also listed here by source, so the walk
// visits the chosen few. A search that stamps more than the list is meant for
// (scoring policies stamp every subtree's local choice) gives the list up
// for that walk, which then reads the stamps as before.
#pragma once
#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

namespace fluxion {

class WideEdgeLists {
   public:
    static constexpr size_t kFanout = 256;     // out-edges that make a vertex wide
    static constexpr size_t kCapacity = 4096;  // stamps listed before giving up

    void set_enabled(bool on) { enabled_ = on; }
    // A new search: nothing listed yet, and the lists in use if enabled.
    void reset() {
        stamps_.clear();
        listed_ = enabled_;
    }
    // Whether stamps are being listed (else note() need not be asked).
    bool listing() const { return listed_; }
    // Edge `e` out of `source` (with `fanout` out-edges) was stamped.
    void note(int source, int e, size_t fanout) {
        if (fanout < kFanout) return;
        if (stamps_.size() >= kCapacity) {
            listed_ = false;
            stamps_.clear();
            return;
        }
        stamps_.emplace_back(source, e);
    }
    // Once the search is over: by source, then edge id (the order of the
    // out-edges), each edge once.
    void seal() {
        std::sort(stamps_.begin(), stamps_.end());
        stamps_.erase(std::unique(stamps_.begin(), stamps_.end()), stamps_.end());
    }
    // Whether the stamped out-edges of a vertex with `fanout` out-edges are
    // all listed, so for_each_stamped() may stand in for reading every stamp.
    bool covers(size_t fanout) const { return listed_ && fanout >= kFanout; }
    // f(edge) for each stamped out-edge of `source`, in id order (after seal()).
    template <class F>
    void for_each_stamped(int source, F &&f) const {
        auto it = std::lower_bound(stamps_.begin(), stamps_.end(), std::make_pair(source, -1));
        for (; it != stamps_.end() && it->first == source; ++it) f(it->second);
    }

   private:
    std::vector<std::pair<int, int>> stamps_;  // (source, edge), this search
    bool enabled_ = true;                      // a shortcut (set_shortcuts)
    bool listed_ = true;                       // every stamp out of a wide vertex is listed
};

}  // namespace fluxion
