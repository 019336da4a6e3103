// duration.hpp - converting the std::chrono durations and time points that
// the timed calls take into the nanosecond counts the runtime works in,
// without overflow.
//
// duration_cast<nanoseconds>(hours::max()) overflows (undefined behaviour:
// it wrapped to a negative count, and the call returned at once or never),
// and so does t - Clock::now() for time_point::min() or max().  Waiting
// "for ever" by passing duration::max() is a common idiom, so both are
// computed in 128 bits here and saturated to kMaxWaitNs either way: a wait
// that long is as good as for ever, and a deadline now + kMaxWaitNs still
// fits in a signed 64-bit count of nanoseconds.
#pragma once

#include <chrono>
#include <cstdint>
#include <ratio>
#include <type_traits>

namespace capstan::detail {

// The longest wait, about 146 years; longer ones are cut to it.
inline constexpr long long kMaxWaitNs = 1LL << 62;

namespace duration_impl {
// GCC's and Clang's 128-bit integer; __extension__ keeps -Wpedantic quiet.
__extension__ typedef __int128 wide;

inline constexpr long long clamp(wide x) noexcept {
  return x > kMaxWaitNs ? kMaxWaitNs : x < -kMaxWaitNs ? -kMaxWaitNs : static_cast<long long>(x);
}
template <class Rep, class Period>
constexpr wide wide_ns(const std::chrono::duration<Rep, Period>& d) noexcept {
  using PerNs = std::ratio_multiply<Period, std::giga>;  // nanoseconds per tick
  if constexpr (std::is_floating_point_v<Rep>) {
    // In the type duration_cast computes in, so the same value comes out.
    using C = std::common_type_t<long long, Rep, std::intmax_t>;
    C x = static_cast<C>(d.count()) * static_cast<C>(PerNs::num) / static_cast<C>(PerNs::den);
    if (!(x == x)) return 0;  // NaN: no time
    constexpr C lim = static_cast<C>(kMaxWaitNs) * 2;
    if (x > lim) return static_cast<wide>(kMaxWaitNs) * 2;
    if (x < -lim) return -static_cast<wide>(kMaxWaitNs) * 2;
    return static_cast<wide>(x);
  } else {
    // Truncated toward zero, as duration_cast truncates.
    return static_cast<wide>(d.count()) * PerNs::num / PerNs::den;
  }
}
}  // namespace duration_impl

// to_ns returns d in nanoseconds, truncated, saturated to +-kMaxWaitNs.
template <class Rep, class Period>
constexpr long long to_ns(const std::chrono::duration<Rep, Period>& d) noexcept {
  return duration_impl::clamp(duration_impl::wide_ns(d));
}

// ns_until returns the nanoseconds from now until t on t's clock (negative
// if t has passed), saturated to +-kMaxWaitNs.
template <class Clock, class Duration>
long long ns_until(const std::chrono::time_point<Clock, Duration>& t) {
  return duration_impl::clamp(duration_impl::wide_ns(t.time_since_epoch()) -
                              duration_impl::wide_ns(Clock::now().time_since_epoch()));
}

// wait_ns and wait_ns_until are to_ns and ns_until for a wait that takes
// no negative time: a past deadline or a negative duration is 0, "check
// once and give up".
template <class Rep, class Period>
constexpr long long wait_ns(const std::chrono::duration<Rep, Period>& d) noexcept {
  long long ns = to_ns(d);
  return ns < 0 ? 0 : ns;
}
template <class Clock, class Duration>
long long wait_ns_until(const std::chrono::time_point<Clock, Duration>& t) {
  long long ns = ns_until(t);
  return ns < 0 ? 0 : ns;
}

}  // namespace capstan::detail
