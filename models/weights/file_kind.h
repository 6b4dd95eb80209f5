// What a file that should hold weights or a network holds, from its first bytes, for the errors
// that refuse it: "configs/x.yaml is a text file (it starts with "data:"), not ...".
#pragma once

#include <filesystem>
#include <string>

namespace stoker::models::weights {

enum class FileKind {
  kMissing,      // no such file (or not a regular file)
  kEmpty,        // 0 bytes
  kZip,          // a zip archive with a pickle (data.pkl): torch.save's format since PyTorch 1.6
  kTorchScript,  // a zip archive with code (torch.jit.save; Stoker's checkpoints are such archives)
  kOtherZip,     // a zip archive without data.pkl (not from torch), or an unreadable one
  kSafetensors,  // 8-byte little-endian header length, then a JSON header ('{')
  kLegacyTorch,  // torch.save's format before PyTorch 1.6 (a pickle, protocol 2)
  kOther,
};

struct FileDescription {
  FileKind kind = FileKind::kOther;
  // In words, for messages: "a JPEG image", "a text file (it starts with \"data:\")", "empty (0 bytes)".
  std::string what;
};

FileDescription describe_file(const std::filesystem::path& file);

}  // namespace stoker::models::weights
