// The launcher's environment (distributed/launch.h).
#include "distributed/launch.h"

#include <cstdlib>

#include <fmt/format.h>

#include "common/error.h"

namespace stoker::distributed {
namespace {

// A non-negative integer variable; `fallback` when unset.
int64_t integer(const Environment& env, const std::string& name, int64_t fallback) {
  const std::optional<std::string> text = env(name);
  if (!text) return fallback;
  size_t used = 0;
  long long value = -1;
  try {
    value = std::stoll(*text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  STOKER_CHECK(used == text->size() && used > 0 && value >= 0,
               "the environment variable {}='{}' is not a non-negative integer; the launcher (torchrun, "
               "srun) sets it, so check how this process was started",
               name, *text);
  return value;
}

// One bracket group's entries: "01-03,07" -> 01 02 03 07 (padding kept from the range's start).
std::vector<std::string> expand_ranges(const std::string& inside, const std::string& nodelist) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= inside.size()) {
    const size_t comma = std::min(inside.find(',', start), inside.size());
    const std::string part = inside.substr(start, comma - start);
    const size_t dash = part.find('-');
    const std::string lo = part.substr(0, dash), hi = dash == std::string::npos ? lo : part.substr(dash + 1);
    const bool digits = !lo.empty() && !hi.empty() && lo.find_first_not_of("0123456789") == std::string::npos &&
                        hi.find_first_not_of("0123456789") == std::string::npos;
    STOKER_CHECK(digits && std::stoll(lo) <= std::stoll(hi),
                 "the Slurm node list '{}' has '[{}]', whose '{}' is not a number or a range a-b; set "
                 "MASTER_ADDR to the first node's address instead",
                 nodelist, inside, part);
    for (long long i = std::stoll(lo); i <= std::stoll(hi); ++i) {
      out.push_back(fmt::format("{:0{}}", i, lo.size()));
    }
    start = comma + 1;
  }
  return out;
}

// One host expression, brackets and all: "rack[1-2]-n[1,3]" -> rack1-n1 rack1-n3 rack2-n1 rack2-n3.
std::vector<std::string> expand_host(const std::string& host, const std::string& nodelist) {
  const size_t open = host.find('[');
  if (open == std::string::npos) return {host};
  const size_t close = host.find(']', open);
  STOKER_CHECK(close != std::string::npos, "the Slurm node list '{}' has an unclosed '['", nodelist);
  std::vector<std::string> out;
  for (const std::string& middle : expand_ranges(host.substr(open + 1, close - open - 1), nodelist)) {
    for (const std::string& rest : expand_host(host.substr(close + 1), nodelist)) {
      out.push_back(host.substr(0, open) + middle + rest);
    }
  }
  return out;
}

}  // namespace

std::vector<std::string> expand_nodelist(const std::string& nodelist) {
  std::vector<std::string> hosts;
  int depth = 0;
  std::string item;
  auto flush = [&] {
    STOKER_CHECK(!item.empty(), "the Slurm node list '{}' has an empty entry", nodelist);
    for (std::string& h : expand_host(item, nodelist)) hosts.push_back(std::move(h));
    item.clear();
  };
  for (const char c : nodelist) {
    if (c == '[') ++depth;
    if (c == ']') --depth;
    STOKER_CHECK(depth >= 0 && depth <= 1, "the Slurm node list '{}' has unbalanced brackets", nodelist);
    if (c == ',' && depth == 0) {
      flush();
    } else {
      item += c;
    }
  }
  flush();
  return hosts;
}

LaunchInfo launch_info(const Environment& env) {
  LaunchInfo info;
  const bool torchrun = env("WORLD_SIZE").has_value();
  const bool slurm = !torchrun && env("SLURM_NTASKS").has_value();
  if (!torchrun && !slurm) return info;
  info.launcher = torchrun ? "torchrun" : "slurm";
  info.world_size = integer(env, torchrun ? "WORLD_SIZE" : "SLURM_NTASKS", 1);
  info.rank = integer(env, torchrun ? "RANK" : "SLURM_PROCID", 0);
  info.local_rank = integer(env, torchrun ? "LOCAL_RANK" : "SLURM_LOCALID", 0);
  STOKER_CHECK(info.world_size >= 1 && info.rank < info.world_size,
               "the launcher says this is rank {} of a world of {} ({}); the rank must be below the world "
               "size",
               info.rank, info.world_size, torchrun ? "RANK, WORLD_SIZE" : "SLURM_PROCID, SLURM_NTASKS");
  if (const auto addr = env("MASTER_ADDR")) {
    info.master_addr = *addr;
  } else if (slurm) {
    const std::optional<std::string> nodes = env("SLURM_JOB_NODELIST");
    STOKER_CHECK(nodes.has_value() && !nodes->empty(),
                 "Slurm launch without SLURM_JOB_NODELIST or MASTER_ADDR: set MASTER_ADDR to the address of "
                 "the node that runs rank 0");
    info.master_addr = expand_nodelist(*nodes).front();
  } else if (info.world_size > 1) {
    STOKER_FAIL("WORLD_SIZE is {} but MASTER_ADDR is not set; launch with torchrun (python -m "
                "torch.distributed.run) or set MASTER_ADDR and MASTER_PORT",
                info.world_size);
  }
  info.master_port = integer(env, "MASTER_PORT", info.master_port);
  STOKER_CHECK(info.master_port > 0 && info.master_port < 65536, "MASTER_PORT={} is not a TCP port (1-65535)",
               info.master_port);
  info.agent_store = env("TORCHELASTIC_USE_AGENT_STORE").value_or("") == "True";
  info.restart_count = integer(env, "TORCHELASTIC_RESTART_COUNT", 0);
  return info;
}

LaunchInfo launch_info_from_environment() {
  return launch_info([](const std::string& name) -> std::optional<std::string> {
    const char* value = std::getenv(name.c_str());
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  });
}

}  // namespace stoker::distributed
