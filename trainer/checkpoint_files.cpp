// Finding a run's checkpoint file (RUN, RUN:best, RUN:last, a file) and telling a file that is not a
// checkpoint by what it is (trainer/checkpoint.h).
#include <algorithm>
#include <cctype>
#include <fstream>
#include <memory>

#include <caffe2/serialize/inline_container.h>
#include <fmt/format.h>

#include "common/error.h"
#include "common/error_kinds.h"
#include "trainer/checkpoint.h"

namespace stoker {
namespace fs = std::filesystem;

namespace {

constexpr const char* kWhere =
    "pass a run directory (runs/<name>/<time>, or with :best or :last after it) or one of its checkpoints/*.pt";

// The records of a zip archive as libtorch writes them (torch.save, TorchScript), or none.
std::vector<std::string> zip_records(const fs::path& path) {
  try {
    std::ifstream in(path, std::ios::binary);
    caffe2::serialize::PyTorchStreamReader reader(&in);
    return reader.getAllRecords();
  } catch (const std::exception&) {
    return {};
  }
}

bool has_record(const std::vector<std::string>& records, const std::string& name) {
  for (const std::string& r : records) {
    if (r == name || (r.size() > name.size() && r.compare(r.size() - name.size(), name.size(), name) == 0 &&
                      r[r.size() - name.size() - 1] == '/')) {
      return true;
    }
  }
  return false;
}

// Whether the file's first bytes read as text with a `key:` line, as a YAML mapping does.
bool looks_like_yaml(const std::string& head) {
  for (unsigned char c : head) {
    if (c == 0 || (c < 0x20 && c != '\n' && c != '\r' && c != '\t')) return false;
  }
  return head.find(":") != std::string::npos;
}

}  // namespace

std::string describe_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::string head(512, '\0');
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  head.resize(static_cast<size_t>(in.gcount()));
  if (head.empty()) return "empty (0 bytes): perhaps a run killed while writing it; " + std::string(kWhere);
  if (head.rfind("PK\x03\x04", 0) == 0) {
    const std::vector<std::string> records = zip_records(path);
    if (has_record(records, "data.pkl") && !has_record(records, "constants.pkl")) {
      return "a state dict or another torch.save file (what Python's torch.save, torchvision, timm and `trainer "
             "export --format state_dict` write); to start a run from its weights set model.pretrained: " +
             path.string() + "; to evaluate or resume a run, " + kWhere;
    }
    return "";  // a TorchScript archive: a checkpoint, or a module (open_checkpoint tells them apart)
  }
  if (head.size() >= 2 && static_cast<unsigned char>(head[0]) == 0x80 && head[1] >= 2 && head[1] <= 5) {
    return "a torch.save file in the old (pre-1.6) format; load it in Python and save it again with torch.save, "
           "then use it as model.pretrained";
  }
  if (looks_like_yaml(head)) {
    return "a text file (a YAML recipe?): recipes go to --config; --resume and --checkpoint take a run: " +
           std::string(kWhere);
  }
  return "";
}

fs::path resolve_checkpoint(const fs::path& run_dir_or_file) {
  const std::string text = run_dir_or_file.string();
  for (const char* which : {"best", "last"}) {
    const std::string suffix = std::string(":") + which;
    if (text.size() <= suffix.size() || text.compare(text.size() - suffix.size(), suffix.size(), suffix) != 0) continue;
    const fs::path run = text.substr(0, text.size() - suffix.size());
    if (!fs::is_directory(run)) continue;
    const fs::path file = run / "checkpoints" / (std::string(which) + ".pt");
    STOKER_CHECK(fs::is_regular_file(file), "{} has no checkpoints/{}.pt{}", run.string(), which,
                 std::string(which) == "best" ? " (checkpoint.save_best is off, or no epoch ended yet)" : "");
    return file;
  }
  if (fs::is_directory(run_dir_or_file)) {
    const fs::path last = run_dir_or_file / "checkpoints" / "last.pt";
    if (fs::is_regular_file(last)) return last;
    std::vector<std::string> runs;  // <run.dir>/<run.name> given: its runs
    for (const auto& entry : fs::directory_iterator(run_dir_or_file)) {
      if (fs::is_regular_file(entry.path() / "checkpoints" / "last.pt")) runs.push_back(entry.path().string());
    }
    std::sort(runs.begin(), runs.end());
    STOKER_CHECK(runs.empty(), "{} holds {} run(s) but is not one itself; pass one of them, e.g. the latest: {}", text,
                 runs.size(), runs.empty() ? "" : runs.back());
    STOKER_FAIL("{} is a folder but holds no checkpoints/last.pt; {}", text, kWhere);
  }
  STOKER_CHECK_FOUND(fs::is_regular_file(run_dir_or_file), "{}: no such checkpoint file or run directory; {}", text, kWhere);
  const std::string what = describe_file(run_dir_or_file);
  STOKER_CHECK(what.empty(), "{} is {}, not a Stoker checkpoint", text, what);
  return run_dir_or_file;
}

}  // namespace stoker
