// capstan_test.hpp - shared fixtures: run a test body inside the runtime at
// several capability counts.
#pragma once

#include <gtest/gtest.h>

#include <capstan/capstan.hpp>

#include <functional>

namespace capstan_test {

// Sanitizer builds run the big loops at a tenth of their size.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr int kScale = 10;
#else
inline constexpr int kScale = 1;
#endif

inline capstan::options opts(unsigned caps, std::chrono::microseconds slice = std::chrono::microseconds(20000)) {
  capstan::options o;
  o.capabilities = caps;
  o.timeslice = slice;
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  o.stack_size = 1024 * 1024;  // sanitizers inflate frames
#endif
  return o;
}

// WithCaps: a test parameterised over the number of capabilities.
class WithCaps : public ::testing::TestWithParam<unsigned> {
 protected:
  unsigned caps() const { return GetParam(); }
  template <class F>
  auto run(F&& f) {
    return capstan::run(opts(caps()), std::forward<F>(f));
  }
};

inline std::string caps_name(const ::testing::TestParamInfo<unsigned>& info) {
  return "N" + std::to_string(info.param);
}

}  // namespace capstan_test

#define CAPSTAN_INSTANTIATE_CAPS(Suite) \
  INSTANTIATE_TEST_SUITE_P(Caps, Suite, ::testing::Values(1u, 2u, 4u), capstan_test::caps_name)
