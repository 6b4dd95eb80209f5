// common/trace.h: a timeline recorded from several threads, written as Trace Event JSON.
#include "common/trace.h"

#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include "test_util.h"

namespace stoker::trace {
namespace {

TEST(Trace, RecordsOnlyWhileOnAndWritesOneTrackPerThread) {
  stoker::testing::TempDir dir;
  { Scope ignored("before start"); }
  start();
  name_thread("main");
  { Scope s("main work"); }
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([t] {
      name_thread("worker " + std::to_string(t));
      for (int i = 0; i < 4; ++i) Scope s("sample");
    });
  }
  for (auto& t : threads) t.join();
  stop();
  { Scope ignored("after stop"); }
  EXPECT_EQ(event_count(), 1 + 3 * 4);
  write(dir / "trace.json");
  // JSON is YAML: yaml-cpp reads it back.
  const YAML::Node root = YAML::LoadFile((dir / "trace.json").string());
  std::map<int64_t, std::string> names;
  std::map<int64_t, int> events;
  for (const YAML::Node& e : root["traceEvents"]) {
    const int64_t tid = e["tid"].as<int64_t>();
    if (e["ph"].as<std::string>() == "M") {
      names[tid] = e["args"]["name"].as<std::string>();
      continue;
    }
    EXPECT_EQ(e["ph"].as<std::string>(), "X");
    EXPECT_GE(e["ts"].as<double>(), 0.0);
    EXPECT_GE(e["dur"].as<double>(), 0.0);
    EXPECT_NE(e["name"].as<std::string>(), "before start");
    EXPECT_NE(e["name"].as<std::string>(), "after stop");
    ++events[tid];
  }
  ASSERT_EQ(names.size(), 4u);
  int workers = 0;
  for (const auto& [tid, name] : names) {
    if (name.rfind("worker ", 0) == 0) {
      ++workers;
      EXPECT_EQ(events[tid], 4) << name;
    }
  }
  EXPECT_EQ(workers, 3);
  start();  // a new recording forgets the old one
  EXPECT_EQ(event_count(), 0);
  stop();
}

}  // namespace
}  // namespace stoker::trace
