// The tensor collectives (distributed/collectives.h) over a c10d group: the functions behind
// detail::GroupCollectives (distributed/c10d_group.h).
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/comm.hpp>

#include <torch/torch.h>

#include "distributed/c10d_group.h"

namespace stoker::distributed {

namespace detail {

namespace {
// Runs `op` on one contiguous tensor standing for `tensors` (the flat concatenation when there are
// several: Gloo reduces a list only as one tensor per device), then copies the result back.
template <typename Op>
void on_one_tensor(std::vector<torch::Tensor>& tensors, Op op) {
  if (tensors.size() == 1 && tensors[0].is_contiguous()) {
    op(tensors[0]);
    return;
  }
  std::vector<torch::Tensor> flat;
  for (const auto& t : tensors) flat.push_back(t.reshape(-1));
  torch::Tensor all = torch::cat(flat);
  op(all);
  int64_t at = 0;
  for (auto& t : tensors) {
    t.copy_(all.narrow(0, at, t.numel()).view_as(t));
    at += t.numel();
  }
}
}  // namespace

void all_reduce(const PG& group, std::vector<torch::Tensor> tensors, ReduceOp op) {
  if (tensors.empty()) return;
  torch::NoGradGuard no_grad;
  c10d::AllreduceOptions options;
  options.reduceOp = op == ReduceOp::kMax ? c10d::ReduceOp::MAX : c10d::ReduceOp::SUM;
  on_one_tensor(tensors, [&](torch::Tensor& t) {
    std::vector<at::Tensor> one = {t};
    guarded("an all-reduce", [&] { return group->allreduce(one, options)->wait(); });
  });
}

torch::Tensor all_gather(const PG& group, const torch::Tensor& input) {
  torch::NoGradGuard no_grad;
  at::Tensor in = input.contiguous().reshape(-1);
  at::Tensor out = torch::empty({group->getSize() * in.numel()}, in.options());  // flat: Gloo cuts it in rank order
  guarded("an all-gather", [&] { return group->_allgather_base(out, in)->wait(); });
  std::vector<int64_t> shape = {group->getSize()};
  for (int64_t s : input.sizes()) shape.push_back(s);
  return out.view(shape);
}

void broadcast(const PG& group, std::vector<torch::Tensor> tensors) {
  if (tensors.empty()) return;
  torch::NoGradGuard no_grad;
  guarded("broadcasting from rank 0", [&] {
    c10d::broadcast_coalesced(group, tensors, /*buffer_size=*/256u << 20, /*rank=*/0);
    return 0;
  });
}

}  // namespace detail

}  // namespace stoker::distributed
