// The c10d process group and the Reducer behind dist::DataParallel (dist/process_group.h).
// Built against torch 2.11's c10d (CMakeLists.txt refuses other versions: c10d::Reducer's
// constructor changes between releases). ProcessGroupGloo.hpp needs gloo's headers, which the torch
// wheel lacks: Debian's libgloo-dev supplies them (scripts/setup.sh installs it).
#include "dist/process_group.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/csrc/distributed/c10d/comm.hpp>
#include <torch/csrc/distributed/c10d/reducer.hpp>
#ifdef STOKER_WITH_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <algorithm>
#include <cstdlib>
#include <unordered_map>

#include <fmt/format.h>
#include <torch/torch.h>

#include "common/error.h"

namespace stoker::dist {
namespace {

using BackendType = c10d::ProcessGroup::BackendType;
using PG = c10::intrusive_ptr<c10d::ProcessGroup>;

// Whether a collective's error says that the connection to a peer was lost or timed out.
bool lost_peer(const std::string& message) {
  for (const char* sign : {"Connection reset", "Connection closed", "Broken pipe", "imed out", "Timeout"}) {
    if (message.find(sign) != std::string::npos) return true;
  }
  return false;
}

// Runs `f`, turning c10d's and gloo's errors into a stoker::Error that says what was being done.
template <typename F>
auto guarded(const std::string& what, F f) -> decltype(f()) {
  try {
    return f();
  } catch (const std::exception& e) {
    const std::string message = e.what();
    const std::string first = message.substr(0, message.find('\n'));
    STOKER_FAIL("distributed training: {} failed ({}){}", what, first,
                lost_peer(first) ? "; another rank has probably stopped or died first: its output says why" : "");
  }
}

bool is_loopback(const std::string& host) {
  return host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1";
}

// The network device Gloo's ranks connect through: GLOO_SOCKET_IFNAME when set (as in PyTorch), the
// loopback one when the master is on this machine's loopback, else the one this host's name resolves to.
std::shared_ptr<::gloo::transport::Device> gloo_device(const std::string& master_addr) {
  if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME")) {
    return c10d::ProcessGroupGloo::createDeviceForInterface(ifname);
  }
  if (is_loopback(master_addr)) return c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1");
  return c10d::ProcessGroupGloo::createDefaultDevice();
}

c10::intrusive_ptr<c10d::Store> connect_store(const LaunchInfo& launch, const ProcessGroupOptions& o) {
  c10d::TCPStoreOptions so;
  so.port = static_cast<uint16_t>(launch.master_port);
  so.isServer = !launch.agent_store && launch.rank == 0;
  so.waitWorkers = false;
  so.timeout = o.timeout;
  auto store = guarded(fmt::format("connecting to the rendezvous store at {}:{} (as {})", launch.master_addr,
                                   launch.master_port, so.isServer ? "its host, rank 0" : "a client"),
                       [&] { return c10::make_intrusive<c10d::TCPStore>(launch.master_addr, so); });
  // Keys of one attempt apart from those of torchrun's earlier restarts (the agent's store lives on).
  return c10::make_intrusive<c10d::PrefixStore>(fmt::format("stoker/attempt{}", launch.restart_count), store);
}

// A process group over `store` with the backend for `device`.
PG make_group(const c10::intrusive_ptr<c10d::Store>& store, const LaunchInfo& launch, torch::Device device,
              const ProcessGroupOptions& o, std::string& backend_name) {
  const int rank = static_cast<int>(launch.rank), size = static_cast<int>(launch.world_size);
  auto group = c10::make_intrusive<c10d::ProcessGroup>(store, rank, size);
  if (device.is_cuda()) {
#ifdef STOKER_WITH_NCCL
    backend_name = "nccl";
    auto options = c10d::ProcessGroupNCCL::Options::create();
    options->timeout = o.timeout;
    auto nccl = guarded("creating the NCCL process group", [&] {
      return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, options);
    });
    group->setBackend(c10::DeviceType::CUDA, BackendType::NCCL, nccl);
    group->setDefaultBackend(BackendType::NCCL);
    return group;
#else
    STOKER_FAIL("distributed training on CUDA needs NCCL, which this build lacks (nccl.h was not found at "
                "configure time: see the 'Stoker: NCCL' line of the CMake output); train on the CPU with "
                "run.device: cpu, or rebuild with the nvidia-nccl wheel installed");
#endif
  }
  backend_name = "gloo";
  auto options = c10d::ProcessGroupGloo::Options::create(o.timeout);
  options->devices.push_back(gloo_device(launch.master_addr));
  auto gloo = guarded(fmt::format("the Gloo rendezvous of rank {} of {} (timeout {} s)", rank, size,
                                  std::chrono::duration_cast<std::chrono::seconds>(o.timeout).count()),
                      [&] { return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, options); });
  group->setBackend(c10::DeviceType::CPU, BackendType::GLOO, gloo);
  group->setDefaultBackend(BackendType::GLOO);
  return group;
}

// dist::DataParallel over a c10d::Reducer.
class ReducerDataParallel final : public DataParallel {
 public:
  ReducerDataParallel(PG group, torch::Device device, std::vector<torch::Tensor> params,
                      std::unordered_map<size_t, std::string> names, const ProcessGroupOptions& o)
      : group_(std::move(group)), device_(device) {
    const std::vector<size_t> limits = {static_cast<size_t>(o.first_bucket_bytes),
                                        static_cast<size_t>(o.bucket_bytes)};
    const std::vector<bool> sparse(params.size(), false);
    std::vector<std::vector<size_t>> buckets =
        std::get<0>(c10d::compute_bucket_assignment_by_size(params, limits, sparse));
    // Gradients become ready roughly in reverse order of definition: the last layers' buckets first.
    std::reverse(buckets.begin(), buckets.end());
    reducer_ = std::make_unique<c10d::Reducer>(std::move(params), std::move(buckets), group_, sparse,
                                               o.bucket_bytes, /*find_unused_parameters=*/false,
                                               /*gradient_as_bucket_view=*/false, std::move(names),
                                               o.first_bucket_bytes, /*skip_all_reduce_unused_params=*/false,
                                               /*use_python_reducer=*/false,
                                               /*bucket_bytes_cap_list=*/std::vector<int64_t>{});
  }

  int64_t rank() const override { return group_->getRank(); }
  int64_t world_size() const override { return group_->getSize(); }

  void before_backward(bool sync) override {
    if (!sync) return;  // no prepare_for_backward: the Reducer's hooks leave the gradients local
    guarded("preparing the gradient all-reduce", [&] {
      // After the first synchronised step, once: buckets re-cut in the order gradients were ready.
      reducer_->rebuild_buckets();
      reducer_->prepare_for_backward({});
      return 0;
    });
  }

  void sum(std::vector<double>& values) override {
    if (values.empty()) return;
    std::vector<at::Tensor> t = {torch::tensor(values, torch::kFloat64).to(device_)};
    guarded("summing over the ranks", [&] { return group_->allreduce(t)->wait(); });
    const torch::Tensor host = t[0].cpu();
    for (size_t i = 0; i < values.size(); ++i) values[i] = host[static_cast<int64_t>(i)].item<double>();
  }

  void broadcast(std::vector<torch::Tensor> tensors) override {
    if (tensors.empty()) return;
    torch::NoGradGuard no_grad;
    guarded("broadcasting from rank 0", [&] {
      c10d::broadcast_coalesced(group_, tensors, /*buffer_size=*/256u << 20, /*rank=*/0);
      return 0;
    });
  }

 private:
  PG group_;
  torch::Device device_;
  std::unique_ptr<c10d::Reducer> reducer_;
};

}  // namespace

struct ProcessGroup::Impl {
  LaunchInfo launch;
  torch::Device device = torch::kCPU;
  ProcessGroupOptions options;
  PG group;
  std::string backend;
};

ProcessGroup::ProcessGroup(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ProcessGroup::~ProcessGroup() = default;

std::shared_ptr<ProcessGroup> ProcessGroup::join(const LaunchInfo& launch, torch::Device device,
                                                 ProcessGroupOptions options) {
  STOKER_CHECK(launch.world_size >= 1 && launch.rank >= 0 && launch.rank < launch.world_size,
               "rank {} of a world of {} is out of range", launch.rank, launch.world_size);
  auto impl = std::make_unique<Impl>();
  impl->launch = launch;
  impl->device = device;
  impl->options = options;
  impl->group = make_group(connect_store(launch, options), launch, device, options, impl->backend);
  return std::shared_ptr<ProcessGroup>(new ProcessGroup(std::move(impl)));
}

int64_t ProcessGroup::rank() const { return impl_->launch.rank; }
int64_t ProcessGroup::world_size() const { return impl_->launch.world_size; }
const std::string& ProcessGroup::backend() const { return impl_->backend; }

std::shared_ptr<DataParallel> ProcessGroup::data_parallel(torch::nn::Module& model) {
  std::vector<torch::Tensor> params, everything;
  std::unordered_map<size_t, std::string> names;
  for (const auto& item : model.named_parameters()) {
    everything.push_back(item.value());
    if (!item.value().requires_grad()) continue;
    names[params.size()] = item.key();
    params.push_back(item.value());
  }
  for (const auto& item : model.named_buffers()) everything.push_back(item.value());
  STOKER_CHECK(!params.empty(), "distributed training: the model has no trainable parameters");
  auto dp = std::make_shared<ReducerDataParallel>(impl_->group, impl_->device, params, std::move(names),
                                                  impl_->options);
  dp->broadcast(everything);  // every rank starts from rank 0's weights and buffers
  return dp;
}

void ProcessGroup::barrier() {
  guarded("waiting for every rank (barrier)", [&] { return impl_->group->barrier()->wait(); });
}

}  // namespace stoker::dist
