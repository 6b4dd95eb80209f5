// The defects scripts/sanitize.sh expects its sanitizers to stop: built with the build's own flags
// and run with the options the tests get, each must end the process with a report before the suite
// runs, so that a passing suite cannot come from a sanitizer that was off or only printing.
//   canary heap | ub | leak   (asan preset)     canary race   (tsan preset)
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

static volatile int sink;
static void* volatile last;

// Allocates and forgets, in a frame of its own (gone when LeakSanitizer scans the stack at exit).
__attribute__((noinline)) static void lose_memory() {
  for (int i = 0; i < 8; ++i) last = std::malloc(4096);
  last = nullptr;
}

int main(int argc, char** argv) {
  const char* what = argc > 1 ? argv[1] : "";
  if (std::strcmp(what, "heap") == 0) {
    // A size the compiler cannot see (argc is 2), so that UBSan's object-size check leaves it to ASan.
    const std::size_t n = 4 * static_cast<std::size_t>(argc - 1);
    int* p = static_cast<int*>(std::malloc(n * sizeof(int)));
    sink = p[n];  // one past the end
    std::free(p);
  } else if (std::strcmp(what, "ub") == 0) {
    volatile int big = 2147483647;
    sink = big + argc;  // signed overflow
  } else if (std::strcmp(what, "leak") == 0) {
    lose_memory();
  } else if (std::strcmp(what, "race") == 0) {
    int counter = 0;
    std::thread a([&] { for (int i = 0; i < 1000; ++i) ++counter; });
    std::thread b([&] { for (int i = 0; i < 1000; ++i) ++counter; });
    a.join();
    b.join();
    sink = counter;
  } else {
    std::fprintf(stderr, "usage: canary heap|ub|leak|race\n");
    return 2;
  }
  std::printf("canary %s: not stopped\n", what);
  return 0;
}
