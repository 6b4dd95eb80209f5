// The safetensors format (Hugging Face's: what the hub serves as model.safetensors): an 8-byte
// little-endian header length N, N bytes of JSON naming each tensor's dtype, shape and byte range
// ({"name": {"dtype": "F32", "shape": [64, 3, 7, 7], "data_offsets": [0, 37632]}, "__metadata__":
// {...}}), then the tensors' raw little-endian bytes, row-major, back to back.
//
// Written here with nlohmann-json because the format is that small and the safetensors library is
// Rust (its C bindings are not packaged); the tests check the reader against Python's `safetensors`
// package (tests/models/weights/safetensors_test.cpp). Every check the format's specification asks for is
// made, so that a truncated or hostile file is an error naming the file and the tensor, never a read
// outside it: the header's length and JSON, each entry's dtype, shape and offsets (within the data,
// the size of its shape, no overlaps, no gaps), the file's length.
#pragma once

#include <filesystem>
#include <map>
#include <string>

#include "models/weights/torch_save.h"

namespace stoker::models::weights {

// Every tensor of a safetensors file, in the header's order, on the CPU. Throws stoker::Error
// naming the file and what is wrong.
NamedTensors read_safetensors(const std::filesystem::path& file);

// The bytes of a safetensors file holding `tensors` (copied to the CPU and made contiguous), with
// `metadata` as its __metadata__ (omitted when empty). Python's safetensors.torch.load_file reads it.
std::string safetensors_bytes(const NamedTensors& tensors, const std::map<std::string, std::string>& metadata = {});

}  // namespace stoker::models::weights
