// distributed/watchdog.h: the peer watchdog's decisions on recorded heartbeats and an in-memory store
// (which counts the operations), and its thread's abort and end of the process.
#include "distributed/watchdog.h"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

#include "test_util.h"

namespace stoker::distributed {
namespace {

using namespace std::chrono_literals;
using Clock = PeerWatch::Clock;

// Issue 24, G5: a peer whose heartbeat stops changing for longer than the timeout is named; a peer
// that keeps beating, however slow its training, is not.
TEST(PeerWatch, APeerWhoseHeartbeatStopsIsNamed) {
  const auto t0 = Clock::now();
  PeerWatch watch(/*rank=*/0, /*world_size=*/3, /*timeout=*/10s, t0);
  for (int64_t s = 1; s <= 30; ++s) {
    const auto now = t0 + std::chrono::seconds(s);
    watch.beat(1, std::to_string(s), now);            // rank 1 beats every second
    if (s <= 5) watch.beat(2, std::to_string(s), now);  // rank 2 stops after 5 s
    const auto silent = watch.silent(now);
    if (s <= 15) {
      EXPECT_FALSE(silent.has_value()) << "at " << s << " s";
    } else {
      ASSERT_TRUE(silent.has_value()) << "at " << s << " s";
      EXPECT_EQ(silent->first, 2);
      EXPECT_EQ(silent->second, std::chrono::seconds(s - 5));
    }
  }
  // A peer that never beat at all is silent from the start; a peer not watched is never named.
  PeerWatch fresh(1, 2, 10s, t0);
  EXPECT_FALSE(fresh.silent(t0 + 9s).has_value());
  ASSERT_TRUE(fresh.silent(t0 + 11s).has_value());
  EXPECT_EQ(fresh.silent(t0 + 11s)->first, 0);
  PeerWatch only_zero(std::vector<int64_t>{0}, 10s, t0);
  only_zero.beat(0, "1", t0 + 20s);
  EXPECT_FALSE(only_zero.silent(t0 + 25s).has_value());
}

// The rendezvous store in memory, counting every operation.
class MemoryStore final : public HeartbeatStore {
 public:
  void set(const std::string& key, const std::string& value) override {
    std::lock_guard<std::mutex> lock(mutex_);
    ++operations;
    values_[key] = value;
  }
  std::optional<std::string> get_if_set(const std::string& key) override {
    std::lock_guard<std::mutex> lock(mutex_);
    operations += 2;  // check, then get
    if (key.rfind("failure/", 0) == 0) ++failure_reads;
    const auto it = values_.find(key);
    return it == values_.end() ? std::nullopt : std::optional<std::string>(it->second);
  }
  int64_t add(const std::string& key, int64_t delta) override {
    std::lock_guard<std::mutex> lock(mutex_);
    ++operations;
    const int64_t now = (values_.count(key) ? std::stoll(values_[key]) : 0) + delta;
    values_[key] = std::to_string(now);
    return now;
  }
  std::atomic<int64_t> operations{0}, failure_reads{0};

 private:
  std::mutex mutex_;
  std::map<std::string, std::string> values_;
};

// `world` ranks' watchdog rounds on one store.
struct World {
  World(int64_t world, Clock::time_point start, std::chrono::milliseconds timeout = 10s) {
    for (int64_t r = 0; r < world; ++r) rounds.emplace_back(r, world, timeout, start);
  }
  // Every rank in `beating` takes one round at `now`; each rank's finding.
  std::vector<std::optional<std::string>> round(Clock::time_point now, const std::vector<bool>& beating) {
    std::vector<std::optional<std::string>> out(rounds.size());
    for (size_t r = 0; r < rounds.size(); ++r) {
      if (beating[r]) out[r] = rounds[r].look(store, now);
    }
    return out;
  }
  MemoryStore store;
  std::vector<WatchRound> rounds;
};

// Issue 33, G28: the store operations of a round of every rank's watchdog grow linearly with the world
// size (they grew with its square: each rank read each other's heartbeat and failure report), and no
// failure report is read while none was made.
TEST(WatchRound, StoreTrafficIsLinearInTheWorldSize) {
  const auto t0 = Clock::now();
  for (const int64_t n : {4, 16, 64, 256}) {
    World world(n, t0);
    world.round(t0, std::vector<bool>(n, true));  // the first round
    const int64_t before = world.store.operations;
    for (int s = 1; s <= 3; ++s) {
      for (const auto& found : world.round(t0 + std::chrono::seconds(s), std::vector<bool>(n, true))) {
        EXPECT_FALSE(found.has_value()) << *found;
      }
    }
    const double per_rank_round = static_cast<double>(world.store.operations - before) / (3.0 * static_cast<double>(n));
    EXPECT_LE(per_rank_round, 6.0) << n << " ranks";
    EXPECT_EQ(world.store.failure_reads, 0) << n << " ranks";
  }
}

// Rank 0 names a rank whose heartbeat stopped and publishes its verdict; the other ranks take it at
// their next round.
TEST(WatchRound, RankZeroNamesASilentRankAndTheOthersLearnIt) {
  const auto t0 = Clock::now();
  World world(4, t0);
  std::vector<bool> beating = {true, true, true, true};
  for (int s = 0; s <= 5; ++s) world.round(t0 + std::chrono::seconds(s), beating);
  beating[2] = false;  // rank 2 stops at 6 s
  for (int s = 6; s <= 15; ++s) {
    const auto found = world.round(t0 + std::chrono::seconds(s), beating);
    for (const auto& f : found) ASSERT_FALSE(f.has_value()) << "at " << s << " s: " << *f;
  }
  // Rank 2's last beat reached rank 0 at 6 s (each rank reads what the others wrote a round before).
  EXPECT_FALSE(world.round(t0 + 16s, beating)[0].has_value());
  const auto found = world.round(t0 + 17s, beating);  // ranks 1 and 3 look after rank 0 published
  ASSERT_TRUE(found[0].has_value());
  EXPECT_CONTAINS(*found[0], "rank 2 stopped answering: no heartbeat for 11 s");
  ASSERT_TRUE(found[1].has_value());
  ASSERT_TRUE(found[3].has_value());
  EXPECT_EQ(*found[1], *found[0]);
  EXPECT_EQ(*found[3], *found[0]);
}

// A rank's failure report reaches every other rank at its next round; a silent rank 0 is named by
// the others.
TEST(WatchRound, FailureReportsAndASilentRankZeroAreNamed) {
  const auto t0 = Clock::now();
  World world(3, t0);
  world.round(t0, {true, true, true});
  report_failure(world.store, 1, "image folder /data/train does not exist");
  const auto found = world.round(t0 + 1s, {true, true, true});
  EXPECT_EQ(found[0], std::optional<std::string>("rank 1 failed: image folder /data/train does not exist"));
  EXPECT_FALSE(found[1].has_value());  // its own report
  EXPECT_EQ(found[2], found[0]);

  World quiet(3, t0);
  for (int s = 0; s <= 20; ++s) {
    const auto f = quiet.round(t0 + std::chrono::seconds(s), {s < 5, true, true});
    if (s <= 14) {  // rank 0's last beat at 4 s
      EXPECT_FALSE(f[1].has_value()) << "at " << s << " s";
    } else {
      ASSERT_TRUE(f[1].has_value()) << "at " << s << " s";
      EXPECT_CONTAINS(*f[1], "rank 0 stopped answering");
    }
  }
}

// Issue 33, G17: when the abort does not end the process's wait (no one reads the finding), the
// watchdog ends the process `abort_grace` later with the reason; when the finding is read in time
// (the blocked collective failed and the run reports it), it does not.
TEST(Watchdog, EndsTheProcessWhenTheAbortDoesNotReachIt) {
  for (const bool read_in_time : {false, true}) {
    auto store = std::make_unique<MemoryStore>();
    report_failure(*store, 1, "its data folder is missing");
    std::atomic<int> aborts{0};
    std::mutex mutex;
    std::condition_variable ended_cv;
    std::optional<std::string> ended;
    WatchdogOptions o;
    o.peer_timeout = 10s;
    o.interval = 50ms;
    o.abort_grace = 500ms;
    o.abort = [&] { ++aborts; };  // an abort that unblocks nothing (Gloo's)
    o.end_process = [&](const std::string& why) {
      std::lock_guard<std::mutex> lock(mutex);
      ended = why;
      ended_cv.notify_all();
    };
    Watchdog watchdog(0, 2, std::move(store), o);
    const auto start = Clock::now();
    while (read_in_time && !watchdog.lost() && Clock::now() - start < 5s) std::this_thread::sleep_for(10ms);
    std::unique_lock<std::mutex> lock(mutex);
    ended_cv.wait_for(lock, 3s, [&] { return ended.has_value(); });
    if (read_in_time) {
      EXPECT_FALSE(ended.has_value()) << *ended;
      EXPECT_EQ(watchdog.lost(), std::optional<std::string>("rank 1 failed: its data folder is missing"));
    } else {
      ASSERT_TRUE(ended.has_value());
      EXPECT_CONTAINS(*ended, "rank 0: rank 1 failed: its data folder is missing; aborting the collectives did not "
                              "end the wait for them within 0.5 s, so this process ends here");
    }
    EXPECT_EQ(aborts, 1);
  }
}

}  // namespace
}  // namespace stoker::distributed
