#include "distributed/launch.h"

#include <gtest/gtest.h>

#include <map>

#include "test_util.h"

namespace stoker::distributed {
namespace {

// An environment holding exactly `vars`.
Environment env_of(std::map<std::string, std::string> vars) {
  return [vars](const std::string& name) -> std::optional<std::string> {
    const auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

TEST(Launch, NoLauncherIsOneProcess) {
  const LaunchInfo info = launch_info(env_of({{"HOME", "/root"}}));
  EXPECT_EQ(info.launcher, "none");
  EXPECT_EQ(info.world_size, 1);
  EXPECT_EQ(info.rank, 0);
  EXPECT_FALSE(info.distributed());
}

TEST(Launch, TorchrunVariables) {
  const LaunchInfo info = launch_info(env_of({{"RANK", "3"},
                                              {"WORLD_SIZE", "8"},
                                              {"LOCAL_RANK", "1"},
                                              {"MASTER_ADDR", "10.0.0.7"},
                                              {"MASTER_PORT", "29777"},
                                              {"TORCHELASTIC_USE_AGENT_STORE", "True"},
                                              {"TORCHELASTIC_RESTART_COUNT", "2"},
                                              {"SLURM_PROCID", "0"},
                                              {"SLURM_NTASKS", "1"}}));
  EXPECT_EQ(info.launcher, "torchrun");  // torchrun inside a Slurm allocation: torchrun's ranks
  EXPECT_EQ(info.rank, 3);
  EXPECT_EQ(info.world_size, 8);
  EXPECT_EQ(info.local_rank, 1);
  EXPECT_EQ(info.master_addr, "10.0.0.7");
  EXPECT_EQ(info.master_port, 29777);
  EXPECT_TRUE(info.agent_store);
  EXPECT_EQ(info.restart_count, 2);
  EXPECT_TRUE(info.distributed());
  EXPECT_FALSE(launch_info(env_of({{"WORLD_SIZE", "2"}, {"RANK", "0"}, {"MASTER_ADDR", "h"},
                                   {"TORCHELASTIC_USE_AGENT_STORE", "False"}}))
                   .agent_store);
}

TEST(Launch, SlurmTakesTheFirstNodeUnlessMasterAddrIsSet) {
  const LaunchInfo info = launch_info(env_of({{"SLURM_PROCID", "5"},
                                              {"SLURM_NTASKS", "16"},
                                              {"SLURM_LOCALID", "1"},
                                              {"SLURM_JOB_NODELIST", "gpu[07-08,12],login1"}}));
  EXPECT_EQ(info.launcher, "slurm");
  EXPECT_EQ(info.rank, 5);
  EXPECT_EQ(info.world_size, 16);
  EXPECT_EQ(info.local_rank, 1);
  EXPECT_EQ(info.master_addr, "gpu07");
  EXPECT_EQ(info.master_port, 29500);
  const LaunchInfo set = launch_info(env_of({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"},
                                             {"SLURM_JOB_NODELIST", "gpu[07-08]"},
                                             {"MASTER_ADDR", "10.1.1.1"}, {"MASTER_PORT", "1234"}}));
  EXPECT_EQ(set.master_addr, "10.1.1.1");
  EXPECT_EQ(set.master_port, 1234);
}

TEST(Launch, NodelistForms) {
  EXPECT_EQ(expand_nodelist("node7"), (std::vector<std::string>{"node7"}));
  EXPECT_EQ(expand_nodelist("node[01-04],gpu7"),
            (std::vector<std::string>{"node01", "node02", "node03", "node04", "gpu7"}));
  // The zero padding is that of the range's start, as Slurm writes it.
  EXPECT_EQ(expand_nodelist("a[8-10,3]"), (std::vector<std::string>{"a8", "a9", "a10", "a3"}));
  EXPECT_EQ(expand_nodelist("a[008-010]"), (std::vector<std::string>{"a008", "a009", "a010"}));
  EXPECT_EQ(expand_nodelist("r[1-2]-n[1,3]"),
            (std::vector<std::string>{"r1-n1", "r1-n3", "r2-n1", "r2-n3"}));
  EXPECT_CONTAINS(testing::error_of([] { expand_nodelist("node[01-04"); }), "unclosed");
  EXPECT_CONTAINS(testing::error_of([] { expand_nodelist("node[04-01]"); }), "'04-01' is not a number or a range");
  EXPECT_CONTAINS(testing::error_of([] { expand_nodelist("node[a-b]"); }), "MASTER_ADDR");
  EXPECT_CONTAINS(testing::error_of([] { expand_nodelist("a,,b"); }), "empty entry");
}

TEST(Launch, BadValuesNameTheVariable) {
  EXPECT_CONTAINS(testing::error_of([] {
                    launch_info(env_of({{"WORLD_SIZE", "two"}, {"RANK", "0"}, {"MASTER_ADDR", "h"}}));
                  }),
                  "WORLD_SIZE='two' is not a non-negative integer");
  EXPECT_CONTAINS(testing::error_of([] {
                    launch_info(env_of({{"WORLD_SIZE", "2"}, {"RANK", "2"}, {"MASTER_ADDR", "h"}}));
                  }),
                  "rank 2 of a world of 2");
  EXPECT_CONTAINS(testing::error_of([] { launch_info(env_of({{"WORLD_SIZE", "2"}, {"RANK", "1"}})); }),
                  "MASTER_ADDR is not set");
  EXPECT_CONTAINS(testing::error_of([] {
                    launch_info(env_of({{"WORLD_SIZE", "2"}, {"RANK", "1"}, {"MASTER_ADDR", "h"},
                                        {"MASTER_PORT", "70000"}}));
                  }),
                  "MASTER_PORT=70000 is not a TCP port");
  EXPECT_CONTAINS(testing::error_of([] { launch_info(env_of({{"SLURM_NTASKS", "2"}, {"SLURM_PROCID", "0"}})); }),
                  "SLURM_JOB_NODELIST");
}

}  // namespace
}  // namespace stoker::distributed
