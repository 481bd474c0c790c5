// The message of the InputError a call throws ("" when it throws none), for
// tests that check what a bad input is told.
#pragma once
#include <functional>
#include <string>

#include "util/errors.hpp"

namespace fluxion::test_errors {

inline std::string input_error_of(const std::function<void()> &f) {
    try {
        f();
    } catch (const InputError &e) {
        return e.what();
    }
    return "";
}

}  // namespace fluxion::test_errors
