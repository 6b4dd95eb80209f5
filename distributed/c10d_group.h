// Internal to distributed/*.cpp (c10d_collectives.cpp, process_group.cpp, sharded_data_parallel.cpp):
// the c10d group behind the interfaces of distributed/collectives.h
// and distributed/data_parallel.h. Including it needs c10d's and gloo's headers and the backends'
// definitions (CMakeLists.txt sets them, and no precompiled header, on the files that do); no public
// header includes it.
#pragma once

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "common/error.h"
#include "distributed/data_parallel.h"

namespace stoker::distributed {
struct ProcessGroupOptions;  // distributed/process_group.h
}  // namespace stoker::distributed

namespace stoker::distributed::detail {

using PG = c10::intrusive_ptr<c10d::ProcessGroup>;

// Runs `f`, turning c10d's and gloo's errors into a stoker::Error that says what was being done.
template <typename F>
auto guarded(const std::string& what, F f) -> decltype(f()) {
  try {
    return f();
  } catch (const std::exception& e) {
    const std::string message = e.what();
    const std::string first = message.substr(0, message.find('\n'));
    STOKER_FAIL("distributed training: {} failed ({}){}", what, first,
                lost_connection(first) ? "; another rank has probably stopped or died first: its output says why" : "");
  }
}

// The tensor collectives over a c10d group (process_group.cpp), shared by the data-parallel kinds.
void all_reduce(const PG& group, std::vector<torch::Tensor> tensors, ReduceOp op);
torch::Tensor all_gather(const PG& group, const torch::Tensor& input);
void broadcast(const PG& group, std::vector<torch::Tensor> tensors);

// `Base` (Collectives, DataParallel or ShardedDataParallel) with its collectives over `group`.
template <typename Base>
class GroupCollectives : public Base {
 public:
  explicit GroupCollectives(PG group) : group_(std::move(group)) {}
  int64_t rank() const override { return group_->getRank(); }
  int64_t world_size() const override { return group_->getSize(); }
  void all_reduce(std::vector<torch::Tensor> tensors, ReduceOp op) override {
    detail::all_reduce(group_, std::move(tensors), op);
  }
  torch::Tensor all_gather(const torch::Tensor& input) override { return detail::all_gather(group_, input); }
  void broadcast(std::vector<torch::Tensor> tensors) override { detail::broadcast(group_, std::move(tensors)); }

 protected:
  PG group_;
};

// distributed::ShardedDataParallel (ZeRO-1) over `group`, for `params` (the trainable parameters of a
// model, in its order); sharded_data_parallel.cpp.
std::shared_ptr<ShardedDataParallel> make_sharded(PG group, torch::Device device, std::vector<torch::Tensor> params,
                                                  const ProcessGroupOptions& options);

}  // namespace stoker::distributed::detail
