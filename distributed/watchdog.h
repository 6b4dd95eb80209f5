// The peer watchdog of a process group (ProcessGroupOptions::peer_timeout). Every rank beats a heartbeat
// into the rendezvous store once a second, on a thread and a store connection of its own: the main
// thread's connection can be held for minutes by a get that waits (for rank 0's decision on
// train.precision: auto, for NCCL's set-up), and heartbeats queued behind it would stop, so that a
// healthy rank looked dead (issue 33, G18). The store traffic is linear in the world size (G28): rank
// 0 reads every rank's heartbeat and publishes a verdict when one stops; every other rank reads rank
// 0's heartbeat and one counter of events (a rank's failure report, rank 0's verdict), and reads the
// reports only when the counter moves.
//
// When a peer is lost the watchdog records why and aborts the group's collectives, which makes the
// blocked or next collective fail here, and the run then names the rank (ProcessGroup::lost_peer).
// An abort cannot always unblock this process (Gloo has none; an NCCL communicator still being set
// up ignores it: G17). When nobody has read the finding `abort_grace` after the abort, the watchdog
// ends the process with the reason, rather than leave the job hanging until its wall time: the one
// place Stoker's library ends a process, and only once the job is known to be lost.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace stoker::distributed {

// The watchdog's bookkeeping, apart from the store so that it can be tested with numbers: each watched
// peer's last heartbeat value and when it last changed.
class PeerWatch {
 public:
  using Clock = std::chrono::steady_clock;
  // Watches every rank but `rank`.
  PeerWatch(int64_t rank, int64_t world_size, std::chrono::milliseconds timeout, Clock::time_point start);
  // Watches `peers` only.
  PeerWatch(std::vector<int64_t> peers, std::chrono::milliseconds timeout, Clock::time_point start);
  // A heartbeat value read for `peer` at `now` ("" when it has none yet); peers not watched are ignored.
  void beat(int64_t peer, const std::string& value, Clock::time_point now);
  // The first watched peer whose heartbeat has not changed for longer than the timeout, with how long.
  std::optional<std::pair<int64_t, std::chrono::milliseconds>> silent(Clock::time_point now) const;

 private:
  struct Peer {
    int64_t rank = 0;
    std::string value;
    Clock::time_point changed;
  };
  std::chrono::milliseconds timeout_;
  std::vector<Peer> peers_;
};

// The rendezvous store as the watchdog uses it: a c10d::Store in a process group, an in-memory one in
// tests (which count the operations).
class HeartbeatStore {
 public:
  virtual ~HeartbeatStore() = default;
  virtual void set(const std::string& key, const std::string& value) = 0;
  // The value of `key`, or nothing when it was never set (without waiting for it).
  virtual std::optional<std::string> get_if_set(const std::string& key) = 0;
  // Adds `delta` to the counter `key` (0 when missing) and returns its new value.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
};

// The key of `rank`'s failure report (ProcessGroup::report_failure, explain_lost_peer).
std::string failure_key(int64_t rank);
// Leaves `message` as `rank`'s failure report and counts it as an event, so that every watchdog reads it.
void report_failure(HeartbeatStore& store, int64_t rank, const std::string& message);

// One round of rank `rank`'s watchdog in a world of `world_size`: its heartbeat out, the events and
// the heartbeats it watches in (rank 0: every rank's; the others: rank 0's). Why to give up, if it is
// time: a peer's failure report, rank 0's verdict, or a heartbeat silent for longer than `timeout`
// (rank 0 then publishes its verdict for the others).
class WatchRound {
 public:
  WatchRound(int64_t rank, int64_t world_size, std::chrono::milliseconds timeout, PeerWatch::Clock::time_point start);
  std::optional<std::string> look(HeartbeatStore& store, PeerWatch::Clock::time_point now);

 private:
  std::optional<std::string> read_events(HeartbeatStore& store);
  int64_t rank_, world_size_;
  int64_t beat_ = 0, events_seen_ = 0;
  PeerWatch watch_;
};

struct WatchdogOptions {
  std::chrono::milliseconds peer_timeout = std::chrono::seconds(60);
  std::chrono::milliseconds interval = std::chrono::seconds(1);  // between rounds
  // After the abort, how long to wait for the process to read the finding (lost()) before ending it;
  // 0: never end it.
  std::chrono::milliseconds abort_grace = std::chrono::seconds(30);
  std::function<void()> abort;                             // aborts the group's collectives
  std::function<void(const std::string&)> end_process;     // default: end_process_after_failed_abort
  std::string store_gone;  // why to give up when the store cannot be reached (its host stopped)
};

class Watchdog {
 public:
  Watchdog(int64_t rank, int64_t world_size, std::unique_ptr<HeartbeatStore> store, WatchdogOptions options);
  ~Watchdog();  // stops the thread (a process that reached here is not hung)
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;
  // What it found, once it aborted the group; nothing before. Reading a finding tells the watchdog
  // that the abort reached this process, which then does not end it.
  std::optional<std::string> lost() const;

 private:
  void run();
  int64_t rank_;
  std::unique_ptr<HeartbeatStore> store_;
  WatchdogOptions options_;
  WatchRound round_;
  mutable std::mutex mutex_;
  mutable std::condition_variable wake_;
  bool stopping_ = false;
  mutable bool acknowledged_ = false;
  std::optional<std::string> lost_;
  std::thread thread_;  // last: started once the members above exist
};

// The end of a process whose blocked collective an abort could not end: `why` in the log and on
// stderr, then exit status 1 at once (no destructors: they would wait on the same collective).
[[noreturn]] void end_process_after_failed_abort(const std::string& why);

}  // namespace stoker::distributed
