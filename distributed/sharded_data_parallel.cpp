// ZeRO-1's buckets (distributed/data_parallel.h ShardedDataParallel) over a c10d group: the trainable
// parameters and their gradients moved into flat buckets, each rank owning a contiguous 1/N of every
// bucket; the gradients of a bucket reduce-scattered as soon as backward has accumulated them all
// (an autograd post-hook on each parameter's gradient accumulator, as c10d::Reducer does), in bucket
// order on every rank; the updated shares all-gathered back into the parameters after the step.
//
// The buckets are filled from the last parameter to the first (the order in which backward produces
// their gradients), the first one small (ProcessGroupOptions::first_bucket_bytes, so that the first
// reduce-scatter starts early), the others up to bucket_bytes; a bucket holds one dtype. A bucket's
// length is padded to a multiple of the world size.
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <algorithm>
#include <string>
#include <utility>

#include <fmt/ranges.h>

#include <torch/torch.h>

#include "distributed/c10d_group.h"
#include "distributed/process_group.h"

namespace stoker::distributed {

torch::Tensor memory_view(const torch::Tensor& t) {
  STOKER_CHECK(t.is_non_overlapping_and_dense(),
               "memory_view: a tensor of shape {} and strides {} does not fill its memory without gaps",
               fmt::join(t.sizes(), "x"), fmt::join(t.strides(), ","));
  return t.as_strided({t.numel()}, {1}, t.storage_offset());
}

namespace detail {
namespace {

struct Bucket {
  std::vector<int64_t> params;   // indices into the parameters
  std::vector<int64_t> offsets;  // where each starts in the bucket
  int64_t chunk = 0;             // each rank's share; the bucket holds chunk x world_size elements
  torch::Tensor data, grads;     // the parameters' and their gradients' memory
  torch::Tensor reduced;         // this rank's share of the gradients: the mean over the ranks
  int64_t waiting = 0;           // gradients this backward has not accumulated yet
  c10::intrusive_ptr<c10d::Work> work;
};

// Bucket membership: parameter indices from the last to the first, cut at the byte limits and where
// the dtype changes.
std::vector<std::vector<int64_t>> assign_buckets(const std::vector<torch::Tensor>& params, int64_t first_bytes,
                                                 int64_t bytes) {
  std::vector<std::vector<int64_t>> buckets;
  int64_t filled = 0;
  for (auto i = static_cast<int64_t>(params.size()) - 1; i >= 0; --i) {
    const torch::Tensor& p = params[static_cast<size_t>(i)];
    const int64_t limit = buckets.size() <= 1 ? first_bytes : bytes;
    const bool same_dtype = !buckets.empty() && params[buckets.back().front()].scalar_type() == p.scalar_type();
    if (buckets.empty() || !same_dtype || filled >= limit) {
      buckets.emplace_back();
      filled = 0;
    }
    buckets.back().push_back(i);
    filled += p.numel() * static_cast<int64_t>(p.element_size());
  }
  return buckets;
}

class BucketedShards final : public GroupCollectives<ShardedDataParallel> {
 public:
  BucketedShards(PG group, std::vector<torch::Tensor> params, const ProcessGroupOptions& o)
      : GroupCollectives(std::move(group)), params_(std::move(params)), grad_sync_(o.grad_sync) {
    STOKER_CHECK(o.grad_sync == "overlap" || o.grad_sync == "after_backward" || o.grad_sync == "none",
                 "gradient sync '{}' is not overlap, after_backward or none", o.grad_sync);
    torch::NoGradGuard no_grad;
    bucket_of_.resize(params_.size());
    grad_views_.resize(params_.size());
    for (const auto& members : assign_buckets(params_, o.first_bucket_bytes, o.bucket_bytes)) make_bucket(members);
    for (size_t i = 0; i < params_.size(); ++i) add_hook(static_cast<int64_t>(i));
  }

  const std::vector<torch::Tensor>& parameters() const override { return params_; }
  const std::vector<Piece>& pieces() const override { return pieces_; }

  void before_backward(bool sync) override {
    attach_gradients();
    armed_ = sync;
    if (!sync) return;
    for (Bucket& b : buckets_) {
      b.waiting = static_cast<int64_t>(b.params.size());
    }
    next_ = 0;
  }

  void after_backward(bool sync) override {
    if (!sync) return;
    armed_ = false;
    torch::NoGradGuard no_grad;
    if (grad_sync_ == "none") {  // the benchmarks' compute-only variant: each rank's own gradients
      for (Bucket& b : buckets_) b.reduced.copy_(b.grads.narrow(0, rank() * b.chunk, b.chunk));
    } else {
      // Buckets of parameters that got no gradient in this backward (and all of them with
      // grad_sync after_backward) are reduced now, still in order.
      while (next_ < buckets_.size()) launch(next_++);
      for (Bucket& b : buckets_) {
        guarded("the gradient reduce-scatter", [&] { return b.work->wait(); });
        b.work.reset();
        b.reduced.div_(static_cast<double>(world_size()));
      }
    }
    for (size_t k = 0; k < pieces_.size(); ++k) {  // again, after an optimizer.zero_grad() dropped them
      if (!pieces_[k].tensor.grad().defined()) pieces_[k].tensor.mutable_grad() = piece_grads_[k];
    }
  }

  void sum(std::vector<double>& values) override {
    if (values.empty()) return;
    torch::Tensor t = torch::tensor(values, torch::kFloat64).to(buckets_.front().data.device());
    all_reduce({t}, ReduceOp::kSum);
    const torch::Tensor host = t.cpu();
    for (size_t i = 0; i < values.size(); ++i) values[i] = host[static_cast<int64_t>(i)].item<double>();
  }

  void gather_parameters() override {
    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> inputs;  // alive until the works are done
    std::vector<c10::intrusive_ptr<c10d::Work>> works;
    for (Bucket& b : buckets_) {
      inputs.push_back(b.data.narrow(0, rank() * b.chunk, b.chunk).clone());
      works.push_back(guarded("the parameter all-gather", [&] { return group_->_allgather_base(b.data, inputs.back()); }));
    }
    for (auto& work : works) guarded("the parameter all-gather", [&] { return work->wait(); });
  }

  void zero_grad() override {
    torch::NoGradGuard no_grad;
    for (Bucket& b : buckets_) b.grads.zero_();
  }

  std::vector<torch::Tensor> gather_to_rank0(const std::vector<torch::Tensor>& values) override;

 private:
  void make_bucket(const std::vector<int64_t>& members);
  // Makes each parameter's gradient its view into the buckets again where something replaced it
  // (model.zero_grad() sets them to none: zeros then; an assigned tensor: its values are taken).
  void attach_gradients();
  void add_hook(int64_t index);
  // A gradient was accumulated: its bucket is launched once full, after every bucket before it.
  void ready(int64_t index);
  void launch(size_t bucket);

  std::vector<torch::Tensor> params_;
  std::vector<Bucket> buckets_;
  std::vector<size_t> bucket_of_;  // by parameter
  std::vector<Piece> pieces_;
  std::vector<std::pair<size_t, int64_t>> piece_place_;
  std::vector<torch::Tensor> grad_views_, piece_grads_;  // by parameter, by piece  // each piece's bucket and where it starts in its share
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;  // kept alive: they hold the hooks
  std::string grad_sync_;  // ProcessGroupOptions::grad_sync
  bool armed_ = false;     // a synchronised backward is running
  size_t next_ = 0;     // the next bucket to launch
};

void BucketedShards::make_bucket(const std::vector<int64_t>& members) {
  Bucket b;
  b.params = members;
  int64_t numel = 0;
  for (int64_t i : members) {
    b.offsets.push_back(numel);
    numel += params_[static_cast<size_t>(i)].numel();
  }
  const int64_t world = world_size(), r = rank();
  b.chunk = (numel + world - 1) / world;
  const torch::Tensor& first = params_[static_cast<size_t>(members.front())];
  b.data = torch::zeros({b.chunk * world}, first.options());
  b.grads = torch::zeros({b.chunk * world}, first.options());
  b.reduced = torch::zeros({b.chunk}, first.options());
  for (size_t k = 0; k < members.size(); ++k) {
    torch::Tensor& p = params_[static_cast<size_t>(members[k])];
    const int64_t at = b.offsets[k], n = p.numel();
    STOKER_CHECK(p.is_non_overlapping_and_dense(), "distributed.shard_optimizer: a parameter of shape {} is not "
                 "dense in memory", fmt::join(p.sizes(), "x"));
    torch::Tensor view = b.data.as_strided(p.sizes(), p.strides(), at);
    memory_view(view).copy_(memory_view(p));
    p.set_data(view);
    grad_views_[static_cast<size_t>(members[k])] = b.grads.as_strided(p.sizes(), p.strides(), at);
    p.mutable_grad() = grad_views_[static_cast<size_t>(members[k])];
    bucket_of_[static_cast<size_t>(members[k])] = buckets_.size();
    const int64_t lo = std::max(at, r * b.chunk), hi = std::min(at + n, (r + 1) * b.chunk);
    if (lo >= hi) continue;
    Piece piece{members[k], lo - at, b.data.narrow(0, lo, hi - lo)};
    piece_grads_.push_back(b.reduced.narrow(0, lo - r * b.chunk, hi - lo));
    piece.tensor.mutable_grad() = piece_grads_.back();
    pieces_.push_back(std::move(piece));
    piece_place_.emplace_back(buckets_.size(), lo - r * b.chunk);
  }
  buckets_.push_back(std::move(b));
}

void BucketedShards::attach_gradients() {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    torch::Tensor& p = params_[i];
    const torch::Tensor& grad = p.grad();
    if (grad.defined() && grad.is_same(grad_views_[i])) continue;
    if (grad.defined() && grad.data_ptr() == grad_views_[i].data_ptr()) continue;
    if (grad.defined()) {
      grad_views_[i].copy_(grad);
    } else {
      grad_views_[i].zero_();
    }
    p.mutable_grad() = grad_views_[i];
  }
}

void BucketedShards::add_hook(int64_t index) {
  std::shared_ptr<torch::autograd::Node> acc = torch::autograd::impl::grad_accumulator(params_[static_cast<size_t>(index)]);
  acc->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
      [this, index](const torch::autograd::variable_list& outputs, const torch::autograd::variable_list&) {
        ready(index);
        return outputs;
      }));
  accumulators_.push_back(std::move(acc));
}

void BucketedShards::ready(int64_t index) {
  if (!armed_) return;  // an accumulation micro-step: the gradients stay local
  Bucket& b = buckets_[bucket_of_[static_cast<size_t>(index)]];
  STOKER_CHECK(b.waiting > 0, "distributed.shard_optimizer: a parameter's gradient was accumulated twice in one "
               "backward pass (a parameter used by two separate backward calls?)");
  --b.waiting;
  if (grad_sync_ != "overlap") return;  // the benchmarks' variants: all after backward, or none
  while (next_ < buckets_.size() && buckets_[next_].waiting == 0) launch(next_++);
}

void BucketedShards::launch(size_t index) {
  Bucket& b = buckets_[index];
  b.work = guarded("the gradient reduce-scatter", [&] { return group_->_reduce_scatter_base(b.reduced, b.grads); });
}

std::vector<torch::Tensor> BucketedShards::gather_to_rank0(const std::vector<torch::Tensor>& values) {
  STOKER_CHECK(values.size() == pieces_.size(), "gather_to_rank0: {} values for {} pieces", values.size(),
               pieces_.size());
  torch::NoGradGuard no_grad;
  c10::ScalarType dtype = torch::kFloat32;
  for (const auto& v : values) {
    if (v.defined()) dtype = v.scalar_type();
  }
  // Every rank agrees on the dtype (a rank may hold no piece at all): the largest enum value wins.
  torch::Tensor code = torch::full({1}, static_cast<int64_t>(dtype), torch::TensorOptions().dtype(torch::kInt64)
                                                                           .device(buckets_.front().data.device()));
  all_reduce({code}, ReduceOp::kMax);
  dtype = static_cast<c10::ScalarType>(code.item<int64_t>());
  std::vector<torch::Tensor> whole(rank() == 0 ? params_.size() : 0);
  for (size_t index = 0; index < buckets_.size(); ++index) {
    const Bucket& b = buckets_[index];
    torch::Tensor share = torch::zeros({b.chunk}, b.data.options().dtype(dtype));
    for (size_t k = 0; k < pieces_.size(); ++k) {
      if (piece_place_[k].first != index || !values[k].defined()) continue;
      share.narrow(0, piece_place_[k].second, pieces_[k].tensor.numel()).copy_(values[k].reshape(-1));
    }
    const torch::Tensor all = all_gather(share).reshape(-1);
    if (rank() != 0) continue;
    for (size_t m = 0; m < b.params.size(); ++m) {
      const torch::Tensor& p = params_[static_cast<size_t>(b.params[m])];
      torch::Tensor out = torch::empty_strided(p.sizes(), p.strides(), p.options().dtype(dtype));
      memory_view(out).copy_(all.narrow(0, b.offsets[m], p.numel()));
      whole[static_cast<size_t>(b.params[m])] = out;
    }
  }
  return whole;
}

}  // namespace

std::shared_ptr<ShardedDataParallel> make_sharded(PG group, torch::Device /*device*/, std::vector<torch::Tensor> params,
                                                  const ProcessGroupOptions& options) {
  return std::make_shared<BucketedShards>(std::move(group), std::move(params), options);
}

}  // namespace detail
}  // namespace stoker::distributed
