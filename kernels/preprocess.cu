// The fused preprocessing kernel: uint8 NHWC [B, H, W, C] -> (x - mean[c]) * inv_std[c] as
// float32 / bfloat16 / float16 [B, C, H, W], NCHW-contiguous or channels-last, with an optional
// per-sample horizontal flip, in one read of the input and one write of the output. No torch
// headers here (kernels/preprocess.cpp does the tensor side); the launcher takes raw pointers.
//
// Work split: each thread owns 4 consecutive output pixels of one image row (a "group"), so that
//  - it reads the 4 source pixels' 4*C bytes (contiguous in NHWC, mirrored or not) as C 32-bit
//    words when they are 4-byte aligned, and neighbouring threads read neighbouring words;
//  - it writes 4 values at a time: in NCHW the 4 pixels of each channel plane, in channels-last
//    the 4*C interleaved values as C runs of 4, each one 16-byte (float32) or 8-byte (16-bit)
//    store when aligned, and neighbouring threads write neighbouring runs.
// A row whose width is not a multiple of 4 ends in a partial group written value by value.
// Channel counts other than 1, 3 and 4 go through a one-thread-per-pixel kernel.
#include "kernels/preprocess_cuda.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

namespace stoker::kernels::detail {
namespace {

constexpr int kPixels = 4;      // output pixels per thread in the grouped kernel
constexpr int kThreads = 256;   // threads per block
constexpr int64_t kMaxBlocks = int64_t{1} << 30;  // grid-stride loops cover the rest

struct Norm {
  float mean[kMaxChannels];
  float inv_std[kMaxChannels];
};

template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) { return v; }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <>
__device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }

__device__ __forceinline__ uint32_t bits16(__nv_bfloat16 v) { return __bfloat16_as_ushort(v); }
__device__ __forceinline__ uint32_t bits16(__half v) { return __half_as_ushort(v); }

// Stores 4 consecutive values at dst: one vector store when dst is aligned to 4 values.
template <typename T>
__device__ __forceinline__ void store4(T* dst, float a, float b, float c, float d) {
  const bool aligned = (reinterpret_cast<uintptr_t>(dst) % (4 * sizeof(T))) == 0;
  if constexpr (sizeof(T) == 4) {
    if (aligned) {
      *reinterpret_cast<float4*>(dst) = make_float4(a, b, c, d);
    } else {
      dst[0] = a; dst[1] = b; dst[2] = c; dst[3] = d;
    }
  } else {
    const T ta = from_float<T>(a), tb = from_float<T>(b), tc = from_float<T>(c), td = from_float<T>(d);
    if (aligned) {
      *reinterpret_cast<uint2*>(dst) = make_uint2(bits16(ta) | (bits16(tb) << 16), bits16(tc) | (bits16(td) << 16));
    } else {
      dst[0] = ta; dst[1] = tb; dst[2] = tc; dst[3] = td;
    }
  }
}

// The partial group at the end of a row (fewer than kPixels pixels): value by value.
template <int C, typename T, typename Index>
__device__ __forceinline__ void preprocess_row_tail(const uint8_t* in_row, T* dst, Index row, Index b, Index h,
                                                    Index w0, Index height, Index width, bool mirror,
                                                    bool channels_last, const Norm& norm) {
  for (Index w = w0; w < width; ++w) {
    const uint8_t* in = in_row + static_cast<int64_t>(mirror ? width - 1 - w : w) * C;
#pragma unroll
    for (int c = 0; c < C; ++c) {
      const float v = (static_cast<float>(in[c]) - norm.mean[c]) * norm.inv_std[c];
      const int64_t o = channels_last ? (static_cast<int64_t>(row) * width + w) * C + c
                                      : ((static_cast<int64_t>(b) * C + c) * height + h) * width + w;
      dst[o] = from_float<T>(v);
    }
  }
}

// Loads the kPixels * C bytes at `in` (word loads when 4-byte aligned) and normalises them into
// v[j][c] (output pixel j of the group, channel c), mirrored when `mirror`. Compile-time indices
// only, so everything stays in registers.
template <int C>
__device__ __forceinline__ void load_group(const uint8_t* in, bool mirror, const Norm& norm, float (&v)[kPixels][C]) {
  uint8_t px[kPixels * C];
  if ((reinterpret_cast<uintptr_t>(in) & 3) == 0) {
#pragma unroll
    for (int k = 0; k < C; ++k) {
      const uint32_t word = __ldg(reinterpret_cast<const unsigned int*>(in) + k);
      px[4 * k + 0] = static_cast<uint8_t>(word);
      px[4 * k + 1] = static_cast<uint8_t>(word >> 8);
      px[4 * k + 2] = static_cast<uint8_t>(word >> 16);
      px[4 * k + 3] = static_cast<uint8_t>(word >> 24);
    }
  } else {
#pragma unroll
    for (int k = 0; k < kPixels * C; ++k) px[k] = __ldg(in + k);
  }
#pragma unroll
  for (int j = 0; j < kPixels; ++j) {
#pragma unroll
    for (int c = 0; c < C; ++c) {
      const uint8_t x = mirror ? px[(kPixels - 1 - j) * C + c] : px[j * C + c];
      v[j][c] = (static_cast<float>(x) - norm.mean[c]) * norm.inv_std[c];
    }
  }
}

// Stores one group of kPixels pixels x C channels at output pixel (b, h, w0).
template <int C, typename T, typename Index>
__device__ __forceinline__ void store_group(T* dst, const float (&v)[kPixels][C], Index row, Index b, Index h,
                                            Index w0, Index height, Index width, bool channels_last) {
  if (channels_last) {
    // 4 pixels x C channels = 4*C interleaved values, stored as C runs of 4.
    T* out = dst + (static_cast<int64_t>(row) * width + w0) * C;
#pragma unroll
    for (int q = 0; q < C; ++q) {
      const int k = 4 * q;
      store4(out + k, v[(k + 0) / C][(k + 0) % C], v[(k + 1) / C][(k + 1) % C], v[(k + 2) / C][(k + 2) % C],
             v[(k + 3) / C][(k + 3) % C]);
    }
  } else {
#pragma unroll
    for (int c = 0; c < C; ++c) {
      T* out = dst + ((static_cast<int64_t>(b) * C + c) * height + h) * width + w0;
      store4(out, v[0][c], v[1][c], v[2][c], v[3][c]);
    }
  }
}

// Index: uint32_t when every element index fits (cheaper division), else int64_t.
template <int C, typename T, typename Index>
__global__ void __launch_bounds__(kThreads)
preprocess_grouped(const uint8_t* __restrict__ src, T* __restrict__ dst, const uint8_t* __restrict__ flip,
                   Index rows, Index height, Index width, Index groups, bool channels_last, Norm norm) {
  const Index total = rows * groups;
  for (Index i = Index(blockIdx.x) * kThreads + threadIdx.x; i < total; i += Index(gridDim.x) * kThreads) {
    const Index row = i / groups;  // b * H + h
    const Index w0 = (i - row * groups) * kPixels;
    const Index b = row / height;
    const Index h = row - b * height;
    const bool mirror = flip != nullptr && flip[b] != 0;
    const uint8_t* in_row = src + static_cast<int64_t>(row) * width * C;
    if (w0 + kPixels > width) {
      preprocess_row_tail<C>(in_row, dst, row, b, h, w0, height, width, mirror, channels_last, norm);
      continue;
    }
    // Source pixels s0 .. s0+3: the same 4 as the output's, or their mirror image.
    const Index s0 = mirror ? width - w0 - kPixels : w0;
    float v[kPixels][C];
    load_group<C>(in_row + static_cast<int64_t>(s0) * C, mirror, norm, v);
    store_group<C>(dst, v, row, b, h, w0, height, width, channels_last);
  }
}

// Any channel count up to kMaxChannels: one thread per output pixel, value by value.
template <typename T>
__global__ void __launch_bounds__(kThreads)
preprocess_per_pixel(const uint8_t* __restrict__ src, T* __restrict__ dst, const uint8_t* __restrict__ flip,
                     int64_t rows, int64_t height, int64_t width, int64_t channels, bool channels_last,
                     Norm norm) {
  const int64_t total = rows * width;
  for (int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x; i < total; i += int64_t(gridDim.x) * kThreads) {
    const int64_t row = i / width, w = i - row * width;
    const int64_t b = row / height, h = row - b * height;
    const bool mirror = flip != nullptr && flip[b] != 0;
    const uint8_t* in = src + (row * width + (mirror ? width - 1 - w : w)) * channels;
    for (int64_t c = 0; c < channels; ++c) {
      const float v = (static_cast<float>(__ldg(in + c)) - norm.mean[c]) * norm.inv_std[c];
      const int64_t o = channels_last ? i * channels + c : ((b * channels + c) * height + h) * width + w;
      dst[o] = from_float<T>(v);
    }
  }
}

unsigned int blocks_for(int64_t threads) {
  return static_cast<unsigned int>(std::min<int64_t>((threads + kThreads - 1) / kThreads, kMaxBlocks));
}

template <int C, typename T>
void launch_grouped(const PreprocessLaunch& p, const Norm& norm, cudaStream_t stream) {
  const int64_t rows = p.batch * p.height;
  const int64_t groups = (p.width + kPixels - 1) / kPixels;
  const int64_t threads = rows * groups;
  const unsigned int blocks = blocks_for(threads);
  const auto* src = p.src;
  auto* dst = static_cast<T*>(p.dst);
  // 32-bit indices when the grid-stride index cannot overflow them.
  if (threads + int64_t(blocks) * kThreads < (int64_t{1} << 32)) {
    preprocess_grouped<C, T, uint32_t><<<blocks, kThreads, 0, stream>>>(
        src, dst, p.flip, uint32_t(rows), uint32_t(p.height), uint32_t(p.width), uint32_t(groups),
        p.channels_last, norm);
  } else {
    preprocess_grouped<C, T, int64_t><<<blocks, kThreads, 0, stream>>>(
        src, dst, p.flip, rows, p.height, p.width, groups, p.channels_last, norm);
  }
}

template <typename T>
void launch_typed(const PreprocessLaunch& p, cudaStream_t stream) {
  Norm norm{};
  for (int c = 0; c < p.channels; ++c) {
    norm.mean[c] = p.mean[c];
    norm.inv_std[c] = p.inv_std[c];
  }
  switch (p.channels) {
    case 1: return launch_grouped<1, T>(p, norm, stream);
    case 3: return launch_grouped<3, T>(p, norm, stream);
    case 4: return launch_grouped<4, T>(p, norm, stream);
    default: {
      const int64_t rows = p.batch * p.height;
      preprocess_per_pixel<T><<<blocks_for(rows * p.width), kThreads, 0, stream>>>(
          p.src, static_cast<T*>(p.dst), p.flip, rows, p.height, p.width, p.channels, p.channels_last, norm);
    }
  }
}

}  // namespace

cudaError_t launch_preprocess(const PreprocessLaunch& p, cudaStream_t stream) {
  if (p.channels < 1 || p.channels > kMaxChannels || p.batch * p.height * p.width <= 0 || !p.src || !p.dst) {
    return cudaErrorInvalidValue;
  }
  switch (p.out_type) {
    case OutType::kFloat32: launch_typed<float>(p, stream); break;
    case OutType::kBFloat16: launch_typed<__nv_bfloat16>(p, stream); break;
    case OutType::kFloat16: launch_typed<__half>(p, stream); break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace stoker::kernels::detail
