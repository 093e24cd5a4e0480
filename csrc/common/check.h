#pragma once
// One family of checks for ringzip. Each maps to the Python exception a user expects:
// RZ_CHECK_VALUE -> ValueError (bad argument), RZ_CHECK_TYPE -> TypeError (bad dtype/device),
// RZ_CHECK -> RuntimeError (state or peer failures).
#include <c10/util/Exception.h>

#include <exception>
#include <string>

#define RZ_CHECK(cond, ...) TORCH_CHECK(cond, "ringzip: ", __VA_ARGS__)
#define RZ_CHECK_VALUE(cond, ...) TORCH_CHECK_VALUE(cond, "ringzip: ", __VA_ARGS__)
#define RZ_CHECK_TYPE(cond, ...) TORCH_CHECK_TYPE(cond, "ringzip: ", __VA_ARGS__)

namespace ringzip {

// The message of a caught failure, without torch's C++ backtrace (what a user reads).
inline std::string message_of(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const c10::Error& err) {
    return err.what_without_backtrace();
  } catch (const std::exception& err) {
    return err.what();
  } catch (...) {
    return "unknown error";
  }
}

}  // namespace ringzip
