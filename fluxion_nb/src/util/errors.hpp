// Typed errors of the matcher core. Every failure is reported through one of
// these, never by aborting, so a binding layer can map them to exceptions.
#pragma once
#include <stdexcept>
#include <string>

namespace fluxion {

// Input text (JGF, jobspec, R, criteria) is malformed or names something unknown.
struct InputError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// A jobspec names a resource type Fluxion does not know: not in the graph,
// not built in, not in a prune filter. Fluxion's jobspec reader refuses it
// (a type it knows but the graph lacks is read and then matches nothing).
struct UnknownTypeError : InputError {
    using InputError::InputError;
};

// The request names a job id, path or vertex that does not exist.
struct NotFoundError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// An operation conflicts with current state (duplicate job id, bad state change).
struct StateError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

}  // namespace fluxion
