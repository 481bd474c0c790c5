// RFC 20 R version 1 read the way flux-sched's rv1exec reader reads it: only
// execution.R_lite (broker ranks and the ids of their children) and
// execution.nodelist (the host of each rank) count; `scheduling`,
// `starttime` and `expiration` are not looked at.
#pragma once
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace fluxion {

class Graph;

// The ranks of every R_lite entry of `R` (version 1). Throws InputError.
std::set<int64_t> r_lite_ranks(const std::string &R);

// One broker rank of an R: its host and, per child type, the ids R gives it.
struct Rv1Rank {
    int64_t rank = -1;
    // The nodelist host at this rank's position among all of R_lite's ranks.
    std::string host;
    // Child type -> ids, in the order R_lite lists them (a rank listed by
    // several entries has theirs one after the other).
    std::vector<std::pair<std::string, std::set<int64_t>>> children;
};

// Every rank of R_lite, in increasing rank order. Throws InputError.
std::vector<Rv1Rank> read_rv1exec(const std::string &R);

// What replaying an rv1exec R holds in `g`, found as flux-sched finds it: a
// rank's node is the vertex at <root path>/<host> of type node, that rank,
// the id of the host's numeric suffix and size 1; each child is the vertex
// at <node path>/<type><id> of that type, rank, id and size 1, an out-edge
// of the node. So a graph with vertices between the root and the nodes, or
// between a node and what R lists (sockets), or with pooled children
// (size > 1) has nothing an rv1exec R can name.
struct Rv1Holdings {
    // vertex -> (units, held exclusively): every named vertex one unit,
    // exclusively; the root its size, shared.
    std::map<int, std::pair<int64_t, bool>> amounts;
    // Nodes held exclusively by the walk but whose own planner gets no span:
    // those where R names fewer than every other vertex of the node's rank.
    std::vector<int> unplanned;
};

// Throws InputError (malformed R, or a vertex that does not fit R's
// description) or NotFoundError (no vertex where R puts it).
Rv1Holdings rv1exec_holdings(const Graph &g, const std::string &R);

}  // namespace fluxion
