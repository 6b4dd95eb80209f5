// The libFuzzer entry point of one target: compiled once per target with
// -DSTOKER_FUZZ_TARGET=<name of a function in fuzz/fuzz_targets.h> (fuzz/CMakeLists.txt).
#include <cstddef>
#include <cstdint>

#include <ATen/Parallel.h>

#include "fuzz/fuzz_targets.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  at::set_num_threads(1);  // one input at a time: no thread pool to start or to tear down
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  stoker::fuzz::STOKER_FUZZ_TARGET(data, size);
  return 0;
}
