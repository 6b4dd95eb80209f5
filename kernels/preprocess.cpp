// The tensor side of batch preprocessing: input checks, the ATen reference path, and the dispatch
// to the fused CUDA kernel (kernels/preprocess.cu) on the current CUDA stream.
#include "kernels/preprocess.h"

#include <atomic>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include "common/error.h"

#ifdef STOKER_WITH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "kernels/preprocess_cuda.h"
#endif

namespace stoker::kernels {
namespace {

std::string sizes_of(const torch::Tensor& t) {
  return fmt::format("[{}]", fmt::join(t.sizes().vec(), ", "));
}

void check_inputs(const torch::Tensor& images, const PreprocessOptions& o) {
  STOKER_CHECK(images.defined(), "preprocess_images: the image batch is an undefined tensor");
  STOKER_CHECK(images.scalar_type() == torch::kUInt8,
               "preprocess_images: expected uint8 images, got {}; the loader hands out uint8 [B, H, W, C] "
               "batches before normalisation",
               c10::toString(images.scalar_type()));
  STOKER_CHECK(images.dim() == 4, "preprocess_images: expected a 4-d [B, H, W, C] (NHWC) batch, got {} dim(s) {}",
               images.dim(), sizes_of(images));
  const int64_t channels = images.size(3);
  STOKER_CHECK(channels > 0, "preprocess_images: images {} have no channels", sizes_of(images));
  STOKER_CHECK(static_cast<int64_t>(o.mean.size()) == channels && static_cast<int64_t>(o.inv_std.size()) == channels,
               "preprocess_images: images {} have {} channel(s) (the last dim of [B, H, W, C]) but there are {} mean "
               "and {} inv_std value(s); give one of each per channel",
               sizes_of(images), channels, o.mean.size(), o.inv_std.size());
  STOKER_CHECK(o.dtype == torch::kFloat32 || o.dtype == torch::kBFloat16 || o.dtype == torch::kFloat16,
               "preprocess_images: the output dtype must be float32, bfloat16 or float16, got {}",
               c10::toString(o.dtype));
  if (o.flip.defined()) {
    STOKER_CHECK(o.flip.scalar_type() == torch::kBool || o.flip.scalar_type() == torch::kUInt8,
                 "preprocess_images: the flip mask must be bool or uint8, got {}", c10::toString(o.flip.scalar_type()));
    STOKER_CHECK(o.flip.dim() == 1 && o.flip.size(0) == images.size(0),
                 "preprocess_images: the flip mask must be [B] = [{}], one entry per sample, got {}", images.size(0),
                 sizes_of(o.flip));
    STOKER_CHECK(o.flip.is_cpu() || o.flip.device() == images.device(),
                 "preprocess_images: the flip mask is on {} but the images are on {}; put it on the CPU or on the "
                 "images' device",
                 o.flip.device().str(), images.device().str());
  }
}

torch::MemoryFormat format_of(const PreprocessOptions& o) {
  return o.channels_last ? torch::MemoryFormat::ChannelsLast : torch::MemoryFormat::Contiguous;
}

#ifdef STOKER_WITH_CUDA
// Set once a launch found no kernel image for the GPU: every later call takes the ATen path.
std::atomic<bool> no_kernel_image{false};

torch::Tensor preprocess_cuda(const torch::Tensor& images_in, const PreprocessOptions& o) {
  const c10::cuda::CUDAGuard guard(images_in.device());
  const torch::Tensor images = images_in.contiguous();
  const int64_t b = images.size(0), h = images.size(1), w = images.size(2), c = images.size(3);
  torch::Tensor out = torch::empty({b, c, h, w}, images.options().dtype(o.dtype).memory_format(format_of(o)));
  if (out.numel() == 0) return out;
  torch::Tensor flip;
  if (o.flip.defined()) flip = o.flip.to(images.device(), /*non_blocking=*/false).contiguous();

  detail::PreprocessLaunch p;
  p.src = images.data_ptr<uint8_t>();
  p.dst = out.data_ptr();
  p.flip = flip.defined() ? static_cast<const uint8_t*>(flip.data_ptr()) : nullptr;  // bool is one byte
  p.batch = b;
  p.height = h;
  p.width = w;
  p.channels = c;
  for (int64_t k = 0; k < c; ++k) {
    p.mean[k] = o.mean[k];
    p.inv_std[k] = o.inv_std[k];
  }
  p.out_type = o.dtype == torch::kFloat32    ? detail::OutType::kFloat32
               : o.dtype == torch::kBFloat16 ? detail::OutType::kBFloat16
                                             : detail::OutType::kFloat16;
  p.channels_last = o.channels_last;
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(images.device().index()).stream();
  const cudaError_t err = detail::launch_preprocess(p, stream);
  if (err == cudaErrorNoKernelImageForDevice || err == cudaErrorInvalidDeviceFunction) {
    // Built for other GPU architectures (CMAKE_CUDA_ARCHITECTURES): the ATen path does the same.
    no_kernel_image.store(true);
    TORCH_WARN_ONCE("preprocess_images: this build of Stoker has no kernel image for ", images.device().str(),
                    " (", cudaGetErrorName(err), "); using the ATen path instead. Rebuild with its "
                    "architecture in CMAKE_CUDA_ARCHITECTURES for the fused kernel.");
    return preprocess_images_reference(images_in, o);
  }
  STOKER_CHECK(err == cudaSuccess,
               "preprocess_images: the CUDA kernel failed to launch on {} for images {} -> {}: {} ({})",
               images.device().str(), sizes_of(images), c10::toString(o.dtype), cudaGetErrorString(err),
               cudaGetErrorName(err));
  return out;
}
#endif

}  // namespace

static_assert(kPreprocessMaxKernelChannels == 16, "keep in step with detail::kMaxChannels");

torch::Tensor preprocess_images_reference(const torch::Tensor& images, const PreprocessOptions& o) {
  check_inputs(images, o);
  const int64_t c = images.size(3);
  torch::Tensor x = images;
  if (o.flip.defined()) {
    const torch::Tensor mirror = o.flip.to(images.device()).to(torch::kBool).view({images.size(0), 1, 1, 1});
    x = torch::where(mirror, images.flip({2}), images);
  }
  // Per channel with scalar operands: on a GPU, a [C] tensor of the means would be a pageable
  // host-to-device copy, which waits for everything queued on the stream, every batch.
  torch::Tensor out = x.permute({0, 3, 1, 2}).to(torch::kFloat32);
  for (int64_t k = 0; k < c; ++k) out.select(1, k).sub_(o.mean[k]).mul_(o.inv_std[k]);
  return out.to(o.dtype).contiguous(format_of(o));
}

torch::Tensor preprocess_images(const torch::Tensor& images, const PreprocessOptions& o) {
  check_inputs(images, o);
#ifdef STOKER_WITH_CUDA
  if (images.is_cuda() && images.size(3) <= kPreprocessMaxKernelChannels && !no_kernel_image.load()) {
    return preprocess_cuda(images, o);
  }
#endif
  return preprocess_images_reference(images, o);
}

bool preprocess_has_cuda_kernel() {
#ifdef STOKER_WITH_CUDA
  return true;
#else
  return false;
#endif
}

}  // namespace stoker::kernels
