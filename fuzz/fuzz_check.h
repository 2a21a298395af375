// FUZZ_CHECK: the invariant checks of the fuzz targets. A failed check prints what broke and
// aborts, which libFuzzer records as a crash (and the corpus-replay tests report as a failure).
//
// Thread safety: stateless.
#ifndef SHARDLINE_FUZZ_FUZZ_CHECK_H_
#define SHARDLINE_FUZZ_FUZZ_CHECK_H_

#include <cstdio>
#include <cstdlib>

#define FUZZ_CHECK(cond, what)                                                              \
  do {                                                                                      \
    if (!(cond)) {                                                                          \
      std::fprintf(stderr, "%s:%d: FUZZ_CHECK(%s) failed: %s\n", __FILE__, __LINE__, #cond, \
                   std::string(what).c_str());                                              \
      std::abort();                                                                         \
    }                                                                                       \
  } while (0)

#endif  // SHARDLINE_FUZZ_FUZZ_CHECK_H_
