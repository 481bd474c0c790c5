// resource-query's `find`: select vertices of the containment tree by a
// small predicate language (status, schedule state, job ids, names,
// properties, aggregate filters) and emit them as an R document would be.
#pragma once
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "graph/graph.hpp"
#include "traverser/traverser.hpp"

namespace fluxion {

// A parsed find expression. Terms are `key=value` leaves or parenthesised
// sub-expressions, joined by `and`, `or` or plain whitespace (meaning `and`)
// and folded strictly left to right, without precedence, as resource-query
// does.
class FindCriteria {
   public:
    // Throws InputError for a malformed expression or an unknown predicate.
    static FindCriteria parse(const std::string &text);

    // State inherited from ancestors: a vertex under a down, allocated or
    // reserved vertex counts as down, allocated or reserved itself.
    struct Inherited {
        bool down = false;
        bool allocated = false;
        bool reserved = false;
    };
    bool eval(const Graph &g, int v, const Inherited &in) const;

    // From the last `agfilter=` leaf: report aggregate filter usage.
    bool agfilter() const { return agfilter_; }
    // From the last `jobid-*=` leaf; 0 when none.
    int64_t jobid() const { return jobid_; }

    struct Node;

   private:
    std::shared_ptr<const Node> root_;
    bool agfilter_ = false;
    int64_t jobid_ = 0;
};

// Walk the containment tree depth first and emit, in post order, every
// vertex that satisfies `c` together with the ancestors leading to it (all
// whole and exclusive, at their full size). With `agfilter`, only vertices
// carrying an aggregate filter are emitted, each with its usage.
Emission find_vertices(const Graph &g, const FindCriteria &c);

}  // namespace fluxion
