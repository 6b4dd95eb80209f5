// Where this process stands in a distributed run, read from the launcher's environment: its rank,
// the world size, the rank on its node, and the address of the rendezvous store (master).
//
//   torchrun / python -m torch.distributed.run: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
//     MASTER_PORT; TORCHELASTIC_USE_AGENT_STORE=True when the agent hosts the store (every rank then
//     connects as a client); TORCHELASTIC_RESTART_COUNT.
//   Slurm srun: SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID; the master is MASTER_ADDR when set, else
//     the first host of SLURM_JOB_NODELIST (node[01-04],gpu7 -> node01); MASTER_PORT or 29500.
//   Kubeflow PyTorchJob sets the torchrun variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT).
// torchrun's variables win over Slurm's (torchrun inside an allocation). Nothing here comes from the
// config: the saved config is the same on every rank.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace stoker::distributed {

struct LaunchInfo {
  std::string launcher = "none";  // none | torchrun | slurm
  int64_t rank = 0;
  int64_t world_size = 1;
  int64_t local_rank = 0;
  std::string master_addr = "127.0.0.1";
  int64_t master_port = 29500;
  bool agent_store = false;   // the launcher's agent hosts the store: rank 0 connects as a client too
  int64_t restart_count = 0;  // torchrun's restart attempt (keys are kept apart per attempt)

  bool distributed() const { return world_size > 1; }
};

// Looks up one environment variable; nothing when it is unset.
using Environment = std::function<std::optional<std::string>(const std::string& name)>;

// The launch as `env` describes it (world size 1 when it names no launcher). Malformed values are
// errors naming the variable, its value and what was expected.
LaunchInfo launch_info(const Environment& env);
// The same from this process's environment (getenv).
LaunchInfo launch_info_from_environment();

// The host names of a Slurm node list: "node[01-03,07],gpu7" -> node01 node02 node03 node07 gpu7.
// Ranges keep their zero padding. Errors name the list and what is wrong with it.
std::vector<std::string> expand_nodelist(const std::string& nodelist);

}  // namespace stoker::distributed
