// The bodies of Stoker's fuzz targets: each feeds one input to one parser of files that users
// bring (images, IDX, CIFAR batches, tar shards, pickles, torch.save files, YAML configs) and accepts only the
// parser's documented failure, a stoker::Error (pickle::Error for the bare unpickler). Anything
// else - a crash, a sanitizer report, another exception, an allocation beyond the fuzzer's limit -
// is a bug. Compiled twice: into the libFuzzer programs (fuzz/fuzz_main.cpp, scripts/fuzz.sh) and
// into the unit tests, which replay the seed corpus and every past crash (fuzz/corpus/<target>/,
// fuzz/regressions/<target>/) without libFuzzer (tests/fuzz/fuzz_targets_test.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace stoker::fuzz {

// JPEG/PNG: probe_image, a full decode and a region decode (region, channels and scale picked
// from the input's last byte, which both formats ignore after their end marker).
void image(const uint8_t* data, size_t size);
// read_idx on the input as a file (raw or gzip: zlib reads both).
void idx(const uint8_t* data, size_t size);
// load_cifar_dataset on the input as a CIFAR-10 test batch and as a CIFAR-100 test file.
void cifar(const uint8_t* data, size_t size);
// pickle::unpickle on the input as a bare pickle (storages are zero tensors of the numel named), strict and
// lenient.
void pickle(const uint8_t* data, size_t size);
// read_torch_save on the input as a torch.save zip file.
void torch_save(const uint8_t* data, size_t size);
// scan_tar on the input as a tar shard, then group_samples and the index text's round trip.
void tar(const uint8_t* data, size_t size);
// parse_config on the input as YAML (lines "#set key=value" are --set overrides), then the
// round trip: config_to_yaml of the result must parse back to the same YAML.
void config(const uint8_t* data, size_t size);

struct Target {
  const char* name;
  void (*run)(const uint8_t* data, size_t size);
};
// Every target, by the name of its folders under fuzz/corpus/ and fuzz/regressions/.
const std::vector<Target>& targets();

}  // namespace stoker::fuzz
