// The c10d process group and the Reducer behind distributed::DataParallel (distributed/process_group.h).
// Built against torch 2.11's c10d (CMakeLists.txt refuses other versions: c10d::Reducer's
// constructor changes between releases). ProcessGroupGloo.hpp needs gloo's headers, which the torch
// wheel lacks: Debian's libgloo-dev supplies them (scripts/setup.sh installs it).
#include "distributed/process_group.h"

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
#include <exception>
#include <optional>
#include <thread>
#include <unordered_map>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include "common/error.h"
#include "distributed/c10d_group.h"
#include "distributed/watchdog.h"

namespace stoker::distributed {

bool lost_connection(const std::string& message) {
  for (const char* sign : {"Connection reset", "Connection closed", "Connection refused", "Broken pipe", "imed out",
                           "Timeout"}) {
    if (message.find(sign) != std::string::npos) return true;
  }
  return false;
}

namespace {

using BackendType = c10d::ProcessGroup::BackendType;
using detail::guarded;
using detail::PG;

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

// distributed::DataParallel over a c10d::Reducer.
class ReducerDataParallel final : public detail::GroupCollectives<DataParallel> {
 public:
  ReducerDataParallel(PG group, torch::Device device, std::vector<torch::Tensor> params,
                      std::unordered_map<size_t, std::string> names, const ProcessGroupOptions& o)
      : GroupCollectives(std::move(group)), device_(device), params_(params) {
    STOKER_CHECK(o.grad_sync == "overlap" || o.grad_sync == "after_backward" || o.grad_sync == "none",
                 "gradient sync '{}' is not overlap, after_backward or none", o.grad_sync);
    sync_after_backward_ = o.grad_sync == "after_backward";
    if (o.grad_sync != "overlap") return;  // the benchmarks' variants (ProcessGroupOptions::grad_sync)
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

  void before_backward(bool sync) override {
    if (!sync || !reducer_) return;  // no prepare_for_backward: the Reducer's hooks leave the gradients local
    guarded("preparing the gradient all-reduce", [&] {
      // After the first synchronised step, once: buckets re-cut in the order gradients were ready.
      reducer_->rebuild_buckets();
      reducer_->prepare_for_backward({});
      return 0;
    });
  }

  // grad_sync "after_backward": every gradient in one flat all-reduce once backward is done.
  void after_backward(bool sync) override {
    if (!sync || !sync_after_backward_) return;
    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> grads;
    for (const auto& p : params_) grads.push_back(p.grad().defined() ? p.grad().flatten() : torch::zeros_like(p).flatten());
    std::vector<at::Tensor> flat = {torch::cat(grads)};
    guarded("the gradient all-reduce", [&] { return group_->allreduce(flat)->wait(); });
    flat[0].div_(static_cast<double>(world_size()));
    int64_t at = 0;
    for (auto& p : params_) {
      if (p.grad().defined()) p.mutable_grad().copy_(flat[0].narrow(0, at, p.numel()).view_as(p));
      at += p.numel();
    }
  }

  void sum(std::vector<double>& values) override {
    if (values.empty()) return;
    std::vector<at::Tensor> t = {torch::tensor(values, torch::kFloat64).to(device_)};
    guarded("summing over the ranks", [&] { return group_->allreduce(t)->wait(); });
    const torch::Tensor host = t[0].cpu();
    for (size_t i = 0; i < values.size(); ++i) values[i] = host[static_cast<int64_t>(i)].item<double>();
  }


 private:
  torch::Device device_;
  bool sync_after_backward_ = false;  // grad_sync "after_backward"
  std::vector<torch::Tensor> params_;
  std::unique_ptr<c10d::Reducer> reducer_;  // none with grad_sync other than "overlap"
};

// ---- the peer watchdog's store ---------------------------------------------------------------------------

// distributed/watchdog.h's HeartbeatStore over a c10d store.
class C10dHeartbeatStore final : public HeartbeatStore {
 public:
  explicit C10dHeartbeatStore(c10::intrusive_ptr<c10d::Store> store) : store_(std::move(store)) {}
  void set(const std::string& key, const std::string& value) override { store_->set(key, value); }
  std::optional<std::string> get_if_set(const std::string& key) override {
    if (!store_->check({key})) return std::nullopt;
    const std::vector<uint8_t> bytes = store_->get(key);
    return std::string(bytes.begin(), bytes.end());
  }
  int64_t add(const std::string& key, int64_t delta) override { return store_->add(key, delta); }

 private:
  c10::intrusive_ptr<c10d::Store> store_;
};

// Every rank at the store before the backend's first call: a rank that failed before joining (a
// resume checkpoint missing on its node, a device index refused) would otherwise leave the others in
// NCCL's bootstrap, which has no timeout of ours and no watchdog yet. Each rank leaves "joined/<rank>"
// and waits, at most `timeout` (the store's), for every other's; the error names those that never came.
void wait_for_every_rank(c10d::Store& store, const LaunchInfo& launch, std::chrono::milliseconds timeout) {
  const auto key = [](int64_t r) { return fmt::format("joined/{}", r); };
  std::vector<std::string> keys;
  for (int64_t r = 0; r < launch.world_size; ++r) keys.push_back(key(r));
  guarded("announcing this rank in the rendezvous store", [&] { store.set(key(launch.rank), std::vector<uint8_t>{1}); });
  try {
    store.wait(keys, timeout);
    return;
  } catch (const std::exception&) {
    // Below: which ranks are missing.
  }
  std::vector<int64_t> absent;
  guarded("asking the rendezvous store which ranks joined", [&] {
    for (int64_t r = 0; r < launch.world_size; ++r) {
      if (!store.check({key(r)})) absent.push_back(r);
    }
  });
  if (absent.empty()) return;  // they arrived as the wait ended
  STOKER_FAIL("rank {} of {}: {} {} did not join within {} s (the process group's timeout): {} failed or stopped "
              "before joining (the output, or the launcher's, says why: a file missing on a node, a device refused), "
              "or never started",
              launch.rank, launch.world_size, absent.size() == 1 ? "rank" : "ranks", fmt::join(absent, ", "),
              std::chrono::duration_cast<std::chrono::seconds>(timeout).count(), absent.size() == 1 ? "it" : "they");
}

// Sets the backend's communicators up now, while every rank is here (see ProcessGroup::join).
void connect_now(const PG& group, torch::Device device) {
  std::vector<at::Tensor> one = {torch::ones({1}, torch::TensorOptions().device(device))};
  guarded("the first all-reduce, which sets up the communicators while joining", [&] {
    return group->allreduce(one)->wait();
  });
}

// The watchdog of this rank, on a store connection of its own (a clone of `store`: issue 33, G18).
std::unique_ptr<Watchdog> start_watchdog(const c10::intrusive_ptr<c10d::Store>& store, const PG& group,
                                         const LaunchInfo& launch, const ProcessGroupOptions& o) {
  c10::intrusive_ptr<c10d::Store> own =
      guarded("connecting the peer watchdog to the rendezvous store", [&] { return store->clone(); });
  own->setTimeout(std::max<std::chrono::milliseconds>(o.peer_timeout, std::chrono::seconds(5)));
  WatchdogOptions w;
  w.peer_timeout = o.peer_timeout;
  w.abort_grace = o.abort_grace;
  w.abort = [group] { group->abort(); };
  w.end_process = o.end_process;
  w.store_gone = launch.agent_store ? "the launcher's rendezvous store cannot be reached (the launcher stopped?)"
                                    : "rank 0 stopped answering: the rendezvous store it hosts is gone";
  return std::make_unique<Watchdog>(launch.rank, launch.world_size, std::make_unique<C10dHeartbeatStore>(own),
                                    std::move(w));
}

}  // namespace

struct ProcessGroup::Impl {
  LaunchInfo launch;
  torch::Device device = torch::kCPU;
  ProcessGroupOptions options;
  c10::intrusive_ptr<c10d::Store> store;
  PG group;
  std::string backend;
  std::unique_ptr<Watchdog> watchdog;  // declared last: stopped before the group goes
};

ProcessGroup::ProcessGroup(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
// At a normal end (no exception in flight, no peer lost) the backend is shut down as PyTorch's
// destroy_process_group does (NCCL's communicators destroyed; else NCCL warns at every exit that the
// group was not destroyed); after a failure it is left to the process's end, which a lost peer's
// communicator could otherwise hold up.
ProcessGroup::~ProcessGroup() {
  if (!impl_) return;
  const bool lost = impl_->watchdog && impl_->watchdog->lost().has_value();
  impl_->watchdog.reset();  // no abort from it while shutting down
  if (std::uncaught_exceptions() > 0 || lost || !impl_->group) return;
  try {
    impl_->group->shutdown();
  } catch (const std::exception&) {
    // A group that cannot shut down cleanly is left to the process's end, as after a failure.
  }
}

std::shared_ptr<ProcessGroup> ProcessGroup::join(const LaunchInfo& launch, torch::Device device,
                                                 ProcessGroupOptions options) {
  STOKER_CHECK(launch.world_size >= 1 && launch.rank >= 0 && launch.rank < launch.world_size,
               "rank {} of a world of {} is out of range", launch.rank, launch.world_size);
  auto impl = std::make_unique<Impl>();
  impl->launch = launch;
  impl->device = device;
  impl->options = options;
  impl->store = connect_store(launch, options);
  wait_for_every_rank(*impl->store, launch, options.timeout);
  impl->group = make_group(impl->store, launch, device, options, impl->backend);
  connect_now(impl->group, device);
  const bool watch = options.peer_timeout.count() > 0 && launch.world_size > 1 &&
                     (impl->backend == "nccl" || options.watch_peers_on_gloo);
  if (watch) impl->watchdog = start_watchdog(impl->store, impl->group, launch, options);
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

std::shared_ptr<ShardedDataParallel> ProcessGroup::sharded_data_parallel(torch::nn::Module& model) {
  std::vector<torch::Tensor> params, everything;
  for (const auto& p : model.parameters()) {
    everything.push_back(p);
    if (p.requires_grad()) params.push_back(p);
  }
  for (const auto& b : model.buffers()) everything.push_back(b);
  STOKER_CHECK(!params.empty(), "distributed training: the model has no trainable parameters");
  detail::broadcast(impl_->group, everything);  // every rank starts from rank 0's weights and buffers
  return detail::make_sharded(impl_->group, impl_->device, std::move(params), impl_->options);
}

std::shared_ptr<Collectives> ProcessGroup::collectives() {
  return std::make_shared<detail::GroupCollectives<Collectives>>(impl_->group);
}

std::optional<std::string> ProcessGroup::lost_peer() const {
  return impl_->watchdog ? impl_->watchdog->lost() : std::nullopt;
}

void ProcessGroup::barrier() {
  guarded("waiting for every rank (barrier)", [&] { return impl_->group->barrier()->wait(); });
}

// ---- which rank stopped first --------------------------------------------------------------------------
// Each rank that fails leaves "failure/<rank>" (its error) in the store; each rank whose collective
// lost a peer leaves "saw/<rank>" and reads the others'. A rank with neither died without a word.

std::string ProcessGroup::broadcast_text(const std::string& name, const std::string& text) {
  const std::string key = "broadcast/" + name;
  return guarded("receiving rank 0's " + name, [&] {
    if (rank() == 0) {
      impl_->store->set(key, text);
      return text;
    }
    const std::vector<uint8_t> bytes = impl_->store->get(key);
    return std::string(bytes.begin(), bytes.end());
  });
}

void ProcessGroup::report_failure(const std::string& message) {
  try {
    impl_->store->setTimeout(std::chrono::seconds(2));
    C10dHeartbeatStore store(impl_->store);
    distributed::report_failure(store, rank(), message);
  } catch (const std::exception&) {
    // The store is gone too (its host stopped): the others learn nothing more than the lost connection.
  }
}

std::string ProcessGroup::explain_lost_peer(std::chrono::milliseconds wait) {
  const auto deadline = std::chrono::steady_clock::now() + wait;
  std::vector<std::string> failed;
  std::vector<int64_t> silent;
  try {
    c10d::Store& store = *impl_->store;
    store.setTimeout(std::chrono::seconds(2));
    store.set(fmt::format("saw/{}", rank()), "1");
    while (true) {
      failed.clear();
      silent.clear();
      for (int64_t r = 0; r < world_size(); ++r) {
        if (r == rank()) continue;
        if (store.check({failure_key(r)})) {
          const std::vector<uint8_t> bytes = store.get(failure_key(r));
          failed.push_back(fmt::format("rank {} failed first: {}", r, std::string(bytes.begin(), bytes.end())));
        } else if (!store.check({fmt::format("saw/{}", r)})) {
          silent.push_back(r);
        }
      }
      if (!failed.empty() || silent.empty() || std::chrono::steady_clock::now() > deadline) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  } catch (const std::exception&) {
    return impl_->launch.agent_store
               ? "the launcher's rendezvous store cannot be reached either (the launcher stopped?)"
               : "rank 0 stopped (or died) first: the rendezvous store it hosted is gone too; its output says why";
  }
  if (!failed.empty()) return fmt::format("{}", fmt::join(failed, "; "));
  if (!silent.empty()) {
    return fmt::format("rank {} stopped without a word (killed, out of memory, or crashed: its output, the "
                       "launcher's or the kernel log (dmesg) says why)",
                       fmt::join(silent, ", "));
  }
  return "every other rank lost a connection too (the network between the nodes?)";
}

}  // namespace stoker::distributed
