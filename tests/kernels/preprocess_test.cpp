// Tests of kernels/preprocess: the ATen reference path against a hand-written loop (CPU), input
// checks, and on a GPU the fused CUDA kernel against the reference and the loader's CUDA path
// against its CPU path. Tolerances: float32 1e-6 relative (the kernel computes the same float
// operations, so it is in fact exact); bfloat16 one ulp, 2^-8 relative; float16 one ulp, 2^-10
// relative; all with an absolute 1e-6 for values near zero.
#include "kernels/preprocess.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <vector>

#include "common/error.h"
#include "data/loader.h"
#include "data/transform_options.h"
#include "test_util.h"

#ifdef STOKER_WITH_CUDA
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace stoker::kernels {
namespace {

using stoker::testing::error_of;

constexpr double kAtol = 1e-6;

double rtol_of(torch::ScalarType t) {
  return t == torch::kFloat32 ? 1e-6 : t == torch::kBFloat16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -10);
}

const char* name_of(torch::ScalarType t) { return c10::toString(t); }

torch::Tensor random_images(int64_t b, int64_t h, int64_t w, int64_t c, uint64_t seed) {
  torch::manual_seed(seed);
  return torch::randint(0, 256, {b, h, w, c}, torch::TensorOptions().dtype(torch::kUInt8));
}

PreprocessOptions options_for(int64_t channels, torch::ScalarType dtype = torch::kFloat32, bool channels_last = false) {
  PreprocessOptions o;
  for (int64_t c = 0; c < channels; ++c) {
    o.mean.push_back(100.0f + 13.25f * static_cast<float>(c));
    o.inv_std.push_back(1.0f / (55.0f + 3.5f * static_cast<float>(c)));
  }
  o.dtype = dtype;
  o.channels_last = channels_last;
  return o;
}

// The definition, written out: out[b][c][h][w] = (x[b][h][w'][c] - mean[c]) * inv_std[c] in float,
// w' = W-1-w where sample b is flipped. Returns float32 NCHW.
torch::Tensor hand_loop(const torch::Tensor& images, const PreprocessOptions& o, const std::vector<bool>& flip) {
  const int64_t B = images.size(0), H = images.size(1), W = images.size(2), C = images.size(3);
  torch::Tensor out = torch::empty({B, C, H, W}, torch::kFloat32);
  auto in = images.accessor<uint8_t, 4>();
  auto acc = out.accessor<float, 4>();
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t c = 0; c < C; ++c) {
      for (int64_t h = 0; h < H; ++h) {
        for (int64_t w = 0; w < W; ++w) {
          const int64_t sw = !flip.empty() && flip[b] ? W - 1 - w : w;
          acc[b][c][h][w] = (static_cast<float>(in[b][h][sw][c]) - o.mean[c]) * o.inv_std[c];
        }
      }
    }
  }
  return out;
}

// Expects `got` (any dtype) to equal `want` (float32) within dtype's tolerance, with the layout asked for.
void expect_close(const torch::Tensor& got, const torch::Tensor& want, const PreprocessOptions& o, const std::string& what) {
  EXPECT_EQ(got.scalar_type(), o.dtype) << what;
  EXPECT_EQ(got.sizes(), want.sizes()) << what;
  EXPECT_TRUE(got.is_contiguous(o.channels_last ? torch::MemoryFormat::ChannelsLast : torch::MemoryFormat::Contiguous))
      << what;
  const torch::Tensor g = got.to(torch::kCPU, torch::kFloat32), w = want.to(torch::kCPU, torch::kFloat32);
  const double rtol = rtol_of(o.dtype);
  const torch::Tensor excess = (g - w).abs() - (kAtol + rtol * w.abs());
  EXPECT_LE(excess.max().item<double>(), 0.0)
      << what << ": worst |got - want| = " << (g - w).abs().max().item<double>() << " (rtol " << rtol << ")";
}

// ---- the reference path, on the CPU --------------------------------------------------------------

TEST(PreprocessReference, Float32EqualsTheHandLoopExactly) {
  const torch::Tensor images = random_images(3, 5, 7, 3, 1);
  for (bool channels_last : {false, true}) {
    const PreprocessOptions o = options_for(3, torch::kFloat32, channels_last);
    const torch::Tensor out = preprocess_images_reference(images, o);
    EXPECT_TRUE(out.is_contiguous(channels_last ? torch::MemoryFormat::ChannelsLast : torch::MemoryFormat::Contiguous));
    EXPECT_TRUE(torch::equal(out, hand_loop(images, o, {}))) << "channels_last " << channels_last;
  }
}

TEST(PreprocessReference, HalfPrecisionWithinOneUlpOfTheHandLoop) {
  const torch::Tensor images = random_images(2, 6, 5, 3, 2);
  for (torch::ScalarType dtype : {torch::kBFloat16, torch::kFloat16}) {
    for (bool channels_last : {false, true}) {
      const PreprocessOptions o = options_for(3, dtype, channels_last);
      expect_close(preprocess_images_reference(images, o), hand_loop(images, o, {}), o,
                   fmt::format("{} channels_last {}", name_of(dtype), channels_last));
    }
  }
}

TEST(PreprocessReference, FlipMirrorsOnlyTheMaskedSamples) {
  const torch::Tensor images = random_images(3, 4, 6, 3, 3);
  PreprocessOptions o = options_for(3);
  const torch::Tensor plain = preprocess_images_reference(images, o);
  for (torch::ScalarType mask_type : {torch::kBool, torch::kUInt8}) {
    o.flip = torch::tensor({1, 0, 1}, torch::kUInt8).to(mask_type);
    const torch::Tensor out = preprocess_images_reference(images, o);
    EXPECT_TRUE(torch::equal(out, hand_loop(images, o, {true, false, true})));
    EXPECT_TRUE(torch::equal(out[0], plain[0].flip({2})));
    EXPECT_TRUE(torch::equal(out[1], plain[1]));
    EXPECT_TRUE(torch::equal(out[2], plain[2].flip({2})));
  }
  // A visible case: one row 1 2 3, mirrored to 3 2 1.
  PreprocessOptions one = options_for(1);
  one.mean = {0.0f};
  one.inv_std = {1.0f};
  one.flip = torch::tensor({true});
  const torch::Tensor row = torch::tensor({1, 2, 3}, torch::kUInt8).view({1, 1, 3, 1});
  EXPECT_TRUE(torch::equal(preprocess_images_reference(row, one), torch::tensor({3.0f, 2.0f, 1.0f}).view({1, 1, 1, 3})));
}

TEST(PreprocessReference, LayoutIsOnlyAMemoryFormat) {
  const torch::Tensor images = random_images(2, 3, 4, 4, 4);
  const torch::Tensor a = preprocess_images_reference(images, options_for(4, torch::kFloat32, false));
  const torch::Tensor b = preprocess_images_reference(images, options_for(4, torch::kFloat32, true));
  EXPECT_TRUE(a.is_contiguous());
  EXPECT_TRUE(b.is_contiguous(torch::MemoryFormat::ChannelsLast));
  EXPECT_FALSE(b.is_contiguous());
  EXPECT_TRUE(torch::equal(a, b));
}

TEST(PreprocessImages, OnTheCpuGivesTheReference) {
  const torch::Tensor images = random_images(2, 5, 5, 3, 5);
  PreprocessOptions o = options_for(3, torch::kBFloat16, true);
  o.flip = torch::tensor({false, true});
  EXPECT_TRUE(torch::equal(preprocess_images(images, o), preprocess_images_reference(images, o)));
}

TEST(PreprocessImages, AnEmptyBatchGivesAnEmptyResult) {
  const torch::Tensor images = torch::zeros({0, 4, 4, 3}, torch::kUInt8);
  PreprocessOptions o = options_for(3);
  o.flip = torch::zeros({0}, torch::kBool);
  const torch::Tensor out = preprocess_images(images, o);
  EXPECT_EQ(out.sizes(), (std::vector<int64_t>{0, 3, 4, 4}));
}

TEST(PreprocessImages, RejectsBadInputWithClearMessages) {
  const torch::Tensor images = random_images(2, 4, 4, 3, 6);
  const PreprocessOptions o = options_for(3);
  EXPECT_CONTAINS(error_of([&] { preprocess_images(images.to(torch::kFloat32), o); }),
                  "expected uint8 images, got Float");
  EXPECT_CONTAINS(error_of([&] { preprocess_images(images[0], o); }),
                  "expected a 4-d [B, H, W, C] (NHWC) batch, got 3 dim(s) [4, 4, 3]");
  EXPECT_CONTAINS(error_of([&] { preprocess_images(images, options_for(1)); }),
                  "have 3 channel(s) (the last dim of [B, H, W, C]) but there are 1 mean and 1 inv_std value(s)");
  PreprocessOptions short_std = o;
  short_std.inv_std.pop_back();
  EXPECT_CONTAINS(error_of([&] { preprocess_images(images, short_std); }), "3 mean and 2 inv_std value(s)");
  PreprocessOptions bad_dtype = o;
  bad_dtype.dtype = torch::kInt32;
  EXPECT_CONTAINS(error_of([&] { preprocess_images(images, bad_dtype); }),
                  "output dtype must be float32, bfloat16 or float16, got Int");
  PreprocessOptions bad_flip = o;
  bad_flip.flip = torch::tensor({1, 0, 1}, torch::kUInt8);
  EXPECT_CONTAINS(error_of([&] { preprocess_images(images, bad_flip); }), "flip mask must be [B] = [2], one entry per sample, got [3]");
  bad_flip.flip = torch::tensor({1.0f, 0.0f});
  EXPECT_CONTAINS(error_of([&] { preprocess_images(images, bad_flip); }), "flip mask must be bool or uint8, got Float");
  EXPECT_CONTAINS(error_of([&] { preprocess_images_reference(torch::Tensor(), o); }), "undefined tensor");
}

// ---- the fused CUDA kernel ----------------------------------------------------------------------

#define STOKER_NEED_CUDA()                                                                               \
  do {                                                                                                   \
    STOKER_NEEDS_CUDA_KERNELS();                                                                          \
  } while (false)

TEST(PreprocessGpu, FusedKernelMatchesTheReference) {
  STOKER_NEED_CUDA();
  const torch::Device gpu(torch::kCUDA, 0);
  struct Shape {
    int64_t b, h, w, c;
  };
  // Widths that are and are not multiples of 4 (full and partial 4-pixel groups), channel counts
  // with a specialised kernel (1, 3, 4) and without (2, 5).
  const std::vector<Shape> shapes = {{4, 8, 16, 3}, {3, 5, 7, 3}, {2, 9, 13, 1}, {2, 6, 12, 4},
                                     {2, 3, 10, 4}, {2, 5, 6, 2}, {2, 4, 9, 5}, {5, 32, 224, 3}};
  uint64_t seed = 10;
  for (const Shape& s : shapes) {
    const torch::Tensor images = random_images(s.b, s.h, s.w, s.c, ++seed).to(gpu);
    std::vector<int64_t> mask(s.b);
    for (int64_t i = 0; i < s.b; ++i) mask[i] = (i * 5 + 1) % 3 == 0 ? 0 : 1;
    for (torch::ScalarType dtype : {torch::kFloat32, torch::kBFloat16, torch::kFloat16}) {
      for (bool channels_last : {false, true}) {
        for (bool flip : {false, true}) {
          PreprocessOptions o = options_for(s.c, dtype, channels_last);
          if (flip) o.flip = torch::tensor(mask, torch::kInt64).to(torch::kBool).to(gpu);
          const torch::Tensor got = preprocess_images(images, o);
          EXPECT_TRUE(got.is_cuda());
          const std::string what = fmt::format("[{}, {}, {}, {}] {} channels_last {} flip {}", s.b, s.h, s.w, s.c,
                                               name_of(dtype), channels_last, flip);
          expect_close(got, preprocess_images_reference(images, o).to(torch::kFloat32), o, what);
          if (dtype == torch::kFloat32) {
            EXPECT_TRUE(torch::equal(got.cpu(), preprocess_images_reference(images.cpu(), [&] {
                                       PreprocessOptions c = o;
                                       if (c.flip.defined()) c.flip = c.flip.cpu();
                                       return c;
                                     }()))) << what << ": float32 should match the CPU reference bit for bit";
          }
        }
      }
    }
  }
}

TEST(PreprocessGpu, UnalignedInputAndAMaskOnTheCpu) {
  STOKER_NEED_CUDA();
  const torch::Device gpu(torch::kCUDA, 0);
  // A batch starting one byte into its storage: the kernel must fall back to byte loads.
  const int64_t b = 3, h = 4, w = 8, c = 3;
  const torch::Tensor storage = random_images(1, 1, 1, b * h * w * c + 1, 40).view({-1}).to(gpu);
  const torch::Tensor images = storage.narrow(0, 1, b * h * w * c).view({b, h, w, c});
  ASSERT_NE(reinterpret_cast<uintptr_t>(images.data_ptr()) % 4, 0u);
  for (torch::ScalarType dtype : {torch::kFloat32, torch::kBFloat16}) {
    for (bool channels_last : {false, true}) {
      PreprocessOptions o = options_for(c, dtype, channels_last);
      o.flip = torch::tensor({0, 1, 1}, torch::kUInt8);  // on the CPU
      expect_close(preprocess_images(images, o), preprocess_images_reference(images, o).to(torch::kFloat32), o,
                   fmt::format("unaligned {} channels_last {}", name_of(dtype), channels_last));
    }
  }
}

// The kernel must go on the caller's current stream: captured into a CUDA graph on a side stream
// (a launch on any other stream would break the capture), then replayed on new pixels.
TEST(PreprocessGpu, RunsOnTheCurrentStreamAndInACudaGraph) {
  STOKER_NEED_CUDA();
#ifdef STOKER_WITH_CUDA
  const torch::Device gpu(torch::kCUDA, 0);
  torch::Tensor images = random_images(8, 64, 64, 3, 41).to(gpu);
  const PreprocessOptions o = options_for(3, torch::kBFloat16, true);
  torch::cuda::synchronize();
  const c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, 0);
  at::cuda::CUDAGraph graph;
  torch::Tensor out;
  {
    const c10::cuda::CUDAStreamGuard guard(side);
    graph.capture_begin();
    out = preprocess_images(images, o);
    graph.capture_end();
  }
  const torch::Tensor next = random_images(8, 64, 64, 3, 42).to(gpu);
  images.copy_(next);
  graph.replay();
  torch::cuda::synchronize();
  EXPECT_TRUE(torch::equal(out, preprocess_images_reference(next, o)));
#endif
}

TEST(PreprocessGpu, LoaderCudaPathEqualsTheCpuPath) {
  STOKER_NEED_CUDA();
  std::vector<uint8_t> pixels(32 * 6 * 10 * 3);
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<uint8_t>((i * 37 + i / 7) % 256);
  auto set = std::make_shared<data::TensorImageDataset>(pixels, std::vector<int64_t>(32, 3), 6, 10, 3, 10, "test");
  for (torch::ScalarType dtype : {torch::kFloat32, torch::kBFloat16}) {
    for (bool channels_last : {false, true}) {
      data::LoaderOptions lo;
      lo.batch_size = 8;
      lo.seed = 3;
      lo.workers = 1;
      lo.mean = {0.485, 0.456, 0.406};
      lo.std = {0.229, 0.224, 0.225};
      lo.transforms = {data::make_transform("horizontal_flip")};
      lo.channels_last = channels_last;
      lo.input_dtype = dtype;
      data::Loader cpu(set, lo);
      lo.device = torch::Device(torch::kCUDA, 0);
      data::Loader gpu(set, lo);
      cpu.start_epoch(1);
      gpu.start_epoch(1);
      int64_t batches = 0;
      while (auto a = cpu.next()) {
        auto b = gpu.next();
        ASSERT_TRUE(b.has_value());
        EXPECT_TRUE(b->input.is_cuda());
        EXPECT_EQ(b->input.scalar_type(), dtype);
        EXPECT_TRUE(b->input.is_contiguous(channels_last ? torch::MemoryFormat::ChannelsLast
                                                         : torch::MemoryFormat::Contiguous));
        // Both round the same float32 values once: equal, bf16 included.
        EXPECT_TRUE(torch::equal(a->input, b->input.cpu()))
            << name_of(dtype) << " channels_last " << channels_last << " batch " << batches;
        ++batches;
      }
      EXPECT_FALSE(gpu.next().has_value());
      EXPECT_EQ(batches, 4);
    }
  }
}

}  // namespace
}  // namespace stoker::kernels
