#ifndef FIDELITY_CONDITIONALS_H
#define FIDELITY_CONDITIONALS_H

#include <cstddef>

namespace outer {
namespace inner {

#if defined(USE_FAST)
int pick(int x) { return x * 2; }
#elif defined(USE_SLOW)
int pick(int x) { return x + x; }
#else
int pick(int x) { return x << 1; }
#endif

/// Declared at namespace scope: not a function, not a type.
extern const std::size_t kLimit;
int forward_declared(int);

#ifdef HAS_EXTRA
struct Extra {
  int value;
};
#endif  // HAS_EXTRA

}  // namespace inner
#if defined(CLOSE_EARLY)
}  // namespace outer (early)
#else
}  // namespace outer
#endif

#endif  // FIDELITY_CONDITIONALS_H
