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

// A jobspec names a resource type the graph has no vertex of. Fluxion reads
// such a jobspec and then matches nothing; here it is refused, and the type
// says why, so a caller speaking resource-query can report what it would.
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
