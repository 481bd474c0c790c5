// What a match is asked (the operation, the job and its time window) and
// why it can fail: shared by the traverser and the speed-ups beside it.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include "jobspec/jobspec.hpp"

namespace fluxion {

enum class AllocType { Alloc, AllocOrReserve, Satisfiability, NoAlloc };

// resource-query's match operations.
enum class MatchOp {
    Allocate,
    AllocateOrElseReserve,
    AllocateWithSatisfiability,
    Satisfiability,
    WithoutAllocating,
    WithoutAllocatingFuture,
};
// An operation by its resource-query name; InputError for an unknown one.
MatchOp match_op(std::string_view name);

// Why a match failed, with flux-sched's errno meaning. Unset is internal: a
// subtree memo being recorded has not seen an error yet.
enum class MatchErr { None = 0, Busy, Unsatisfiable, Range, NoEntry, Invalid, Unset };

struct JobMeta {
    int64_t jobid = 0;
    int64_t at = 0;
    int64_t now = 0;
    int64_t duration = 0;
    AllocType alloc_type = AllocType::Alloc;
    const Constraint *constraint = nullptr;
    std::string queue;
};

}  // namespace fluxion
