// runtime_work.hpp - marking a capability while its OS thread does the
// runtime's own long work (Capability::runtime_loop), so that the hog
// warning does not blame the program for it.  See Note [Warning about a
// hog] in schedule/hog_warning.cpp.
#pragma once

#include <atomic>

namespace capstan::rts {

// kLongLoop: a loop of the runtime's own over this many threads or more
// marks its capability while it runs.
inline constexpr unsigned kLongLoop = 1024;

// RuntimeWork sets a capability's runtime_loop flag for its lifetime
// (null: nothing to mark), unless it was set already - by an outer mark,
// which clears it itself.  [owner writes, relaxed; the ticker reads]
class RuntimeWork {
 public:
  explicit RuntimeWork(std::atomic<bool>* flag) noexcept
      : flag_(flag && !flag->load(std::memory_order_relaxed) ? flag : nullptr) {
    if (flag_) flag_->store(true, std::memory_order_relaxed);
  }
  ~RuntimeWork() {
    if (flag_) flag_->store(false, std::memory_order_relaxed);
  }
  RuntimeWork(const RuntimeWork&) = delete;
  RuntimeWork& operator=(const RuntimeWork&) = delete;

 private:
  std::atomic<bool>* flag_;
};

}  // namespace capstan::rts
