#include "test_util.h"
#include "run_command.h"

#include <fmt/format.h>
#include <torch/cuda.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <png.h>
#include <zlib.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>

namespace stoker::testing {
namespace fs = std::filesystem;

TempDir::TempDir() {
  std::string pattern = (fs::temp_directory_path() / "stoker-test-XXXXXX").string();
  if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ignored;
  fs::remove_all(path_, ignored);
}

void write_bytes(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_png(const fs::path& path, int64_t height, int64_t width, int64_t channels,
               const std::vector<uint8_t>& pixels) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) throw std::runtime_error("cannot write " + path.string());
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    std::fclose(f);
    throw std::runtime_error("libpng failed writing " + path.string());
  }
  png_init_io(png, f);
  png_set_IHDR(png, info, static_cast<png_uint_32>(width), static_cast<png_uint_32>(height), 8,
               channels == 1 ? PNG_COLOR_TYPE_GRAY : PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  for (int64_t y = 0; y < height; ++y) {
    png_write_row(png, const_cast<png_bytep>(pixels.data() + y * width * channels));
  }
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  std::fclose(f);
}

void write_idx(const fs::path& path, const std::vector<uint32_t>& dims,
               const std::vector<uint8_t>& data, bool gzip) {
  std::string bytes = {0, 0, 0x08, static_cast<char>(dims.size())};
  for (uint32_t d : dims) {
    for (int shift = 24; shift >= 0; shift -= 8) bytes.push_back(static_cast<char>((d >> shift) & 0xff));
  }
  bytes.append(reinterpret_cast<const char*>(data.data()), data.size());
  if (!gzip) {
    write_bytes(path, bytes);
    return;
  }
  gzFile f = gzopen(path.c_str(), "wb");
  if (f == nullptr) throw std::runtime_error("gzopen failed: " + path.string());
  gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
  gzclose(f);
}

void write_synthetic_idx_dataset(const fs::path& root, int64_t train, int64_t test, int64_t size,
                                 uint64_t seed) {
  fs::create_directories(root);
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> pixel(0, 255);
  std::normal_distribution<double> noise(0.0, 40.0);
  std::vector<std::vector<uint8_t>> templates(10, std::vector<uint8_t>(size * size));
  for (auto& t : templates) {
    for (auto& p : t) p = static_cast<uint8_t>(pixel(rng));
  }
  auto split = [&](const std::string& prefix, int64_t n) {
    std::vector<uint8_t> images(n * size * size), labels(n);
    for (int64_t i = 0; i < n; ++i) {
      labels[i] = static_cast<uint8_t>(i % 10);
      for (int64_t p = 0; p < size * size; ++p) {
        const double v = templates[labels[i]][p] + noise(rng);
        images[i * size * size + p] = static_cast<uint8_t>(std::clamp(v, 0.0, 255.0));
      }
    }
    const auto s = static_cast<uint32_t>(size);
    write_idx(root / (prefix + "-images-idx3-ubyte.gz"), {static_cast<uint32_t>(n), s, s}, images, true);
    write_idx(root / (prefix + "-labels-idx1-ubyte.gz"), {static_cast<uint32_t>(n)}, labels, true);
  };
  split("train", train);
  split("t10k", test);
}

fs::path venv_python(std::string* why) {
  const char* cache = std::getenv("STOKER_CACHE");
  const char* home = std::getenv("HOME");
  const fs::path root = (cache != nullptr && *cache != '\0')
                            ? fs::path(cache)
                            : fs::path(home != nullptr ? home : "/root") / ".cache" / "stoker";
  const fs::path python = root / "venv-torch-2.11.0" / "bin" / "python";
  if (fs::exists(python)) return python;
  if (why != nullptr) {
    *why = "no Python at " + python.string() + "; it comes with the libtorch venv (./stoker.sh build)";
  }
  return {};
}

namespace {
const char* from_env(const char* name, const char* fallback) {
  const char* value = std::getenv(name);
  return (value != nullptr && *value != '\0') ? value : fallback;
}
}  // namespace

const char* source_dir() { return from_env("STOKER_SOURCE_DIR", kBuiltSourceDir); }
const char* trainer_bin() { return from_env("STOKER_TRAINER_BIN", kBuiltTrainerBin); }

int free_port() {
  const int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  int port = -1;
  if (::bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      ::getsockname(s, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  ::close(s);
  return port;
}

int shell(const std::string& command) {
  const int status = std::system(command.c_str());
  return (status != -1 && WIFEXITED(status)) ? WEXITSTATUS(status) : -1;
}

CommandResult run_command(const std::string& line) {
  const std::string command = line + " 2>&1";
  CommandResult r;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return r;
  char buffer[4096];
  while (size_t n = fread(buffer, 1, sizeof buffer, pipe)) r.output.append(buffer, n);
  const int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

std::string cuda_missing(bool kernels) {
  if (!torch::cuda::is_available()) {
    return torch::cuda::device_count() == 0 ? "needs CUDA: no GPU on this machine" : "needs CUDA: libtorch has no CUDA";
  }
#ifndef STOKER_WITH_CUDA
  if (kernels) return "needs CUDA: Stoker was built without its CUDA parts";
#else
  (void)kernels;
#endif
  return "";
}

std::string cuda_devices_missing(int64_t n) {
  const auto have = static_cast<int64_t>(torch::cuda::device_count());
  if (have >= n) return "";
  return fmt::format("needs {} CUDA devices (NCCL: one per rank); this machine has {}", n, have);
}

bool cuda_required() {
  const char* value = std::getenv("STOKER_REQUIRE_CUDA");
  return value != nullptr && std::string(value) == "1";
}

}  // namespace stoker::testing
