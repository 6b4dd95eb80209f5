// The peer watchdog (watchdog.h).
#include "distributed/watchdog.h"

#include <cstdio>
#include <cstdlib>
#include <exception>

#include <fmt/format.h>

#include "common/log.h"

namespace stoker::distributed {
namespace {

constexpr const char* kEventsKey = "watch/events";    // failure reports and verdicts so far
constexpr const char* kVerdictKey = "watch/verdict";  // rank 0's finding about a silent rank

std::string beat_key(int64_t rank) { return fmt::format("beat/{}", rank); }

std::vector<int64_t> all_but(int64_t rank, int64_t world_size) {
  std::vector<int64_t> peers;
  for (int64_t r = 0; r < world_size; ++r) {
    if (r != rank) peers.push_back(r);
  }
  return peers;
}

}  // namespace

// ---- PeerWatch ----------------------------------------------------------------------------------------

PeerWatch::PeerWatch(int64_t rank, int64_t world_size, std::chrono::milliseconds timeout, Clock::time_point start)
    : PeerWatch(all_but(rank, world_size), timeout, start) {}

PeerWatch::PeerWatch(std::vector<int64_t> peers, std::chrono::milliseconds timeout, Clock::time_point start)
    : timeout_(timeout) {
  for (const int64_t r : peers) peers_.push_back({r, "", start});
}

void PeerWatch::beat(int64_t peer, const std::string& value, Clock::time_point now) {
  for (Peer& p : peers_) {
    if (p.rank != peer || p.value == value) continue;
    p.value = value;
    p.changed = now;
  }
}

std::optional<std::pair<int64_t, std::chrono::milliseconds>> PeerWatch::silent(Clock::time_point now) const {
  for (const Peer& p : peers_) {
    const auto quiet = std::chrono::duration_cast<std::chrono::milliseconds>(now - p.changed);
    if (quiet > timeout_) return std::make_pair(p.rank, quiet);
  }
  return std::nullopt;
}

// ---- the store's keys ----------------------------------------------------------------------------------

std::string failure_key(int64_t rank) { return fmt::format("failure/{}", rank); }

void report_failure(HeartbeatStore& store, int64_t rank, const std::string& message) {
  store.set(failure_key(rank), message);
  store.add(kEventsKey, 1);
}

// ---- one round -------------------------------------------------------------------------------------------

WatchRound::WatchRound(int64_t rank, int64_t world_size, std::chrono::milliseconds timeout,
                       PeerWatch::Clock::time_point start)
    : rank_(rank),
      world_size_(world_size),
      watch_(rank == 0 ? all_but(0, world_size) : std::vector<int64_t>{0}, timeout, start) {}

// The reports behind the events counter, read only when it moved: O(world size) once, not every round.
std::optional<std::string> WatchRound::read_events(HeartbeatStore& store) {
  const int64_t events = store.add(kEventsKey, 0);
  if (events == events_seen_) return std::nullopt;
  events_seen_ = events;
  for (int64_t r = 0; r < world_size_; ++r) {
    if (r == rank_) continue;
    if (const std::optional<std::string> report = store.get_if_set(failure_key(r))) {
      return fmt::format("rank {} failed: {}", r, *report);
    }
  }
  if (rank_ != 0) {
    if (const std::optional<std::string> verdict = store.get_if_set(kVerdictKey)) return *verdict;
  }
  return std::nullopt;  // this rank's own report
}

std::optional<std::string> WatchRound::look(HeartbeatStore& store, PeerWatch::Clock::time_point now) {
  store.set(beat_key(rank_), std::to_string(beat_++));
  if (std::optional<std::string> why = read_events(store)) return why;
  for (int64_t r = 0; r < world_size_; ++r) {
    if (r == rank_ || (rank_ != 0 && r != 0)) continue;
    watch_.beat(r, store.get_if_set(beat_key(r)).value_or(""), now);
  }
  const auto silent = watch_.silent(now);
  if (!silent) return std::nullopt;
  const std::string why = fmt::format(
      "rank {} stopped answering: no heartbeat for {} s (killed, frozen or its node lost: its output, the "
      "launcher's or the kernel log (dmesg) says why)",
      silent->first, silent->second.count() / 1000);
  if (rank_ == 0) {  // the others learn it from the verdict
    store.set(kVerdictKey, why);
    store.add(kEventsKey, 1);
  }
  return why;
}

// ---- the thread ------------------------------------------------------------------------------------------

Watchdog::Watchdog(int64_t rank, int64_t world_size, std::unique_ptr<HeartbeatStore> store, WatchdogOptions options)
    : rank_(rank),
      store_(std::move(store)),
      options_(std::move(options)),
      round_(rank, world_size, options_.peer_timeout, PeerWatch::Clock::now()),
      thread_([this] { run(); }) {}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

std::optional<std::string> Watchdog::lost() const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (lost_) {
    acknowledged_ = true;
    wake_.notify_all();
  }
  return lost_;
}

void Watchdog::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  std::optional<std::string> why;
  while (!stopping_ && !why) {
    lock.unlock();
    try {
      why = round_.look(*store_, PeerWatch::Clock::now());
    } catch (const std::exception&) {
      why = options_.store_gone;
    }
    lock.lock();
    if (!why) wake_.wait_for(lock, options_.interval, [this] { return stopping_; });
  }
  if (stopping_) return;
  lost_ = why;
  // The rank's own thread may be blocked in a collective: abort it, and end the process when that
  // does not reach it.
  lock.unlock();
  try {
    if (options_.abort) options_.abort();  // NCCL: the communicators are aborted and blocked collectives fail
  } catch (const std::exception&) {
  }
  lock.lock();
  if (options_.abort_grace.count() <= 0) return;
  if (wake_.wait_for(lock, options_.abort_grace, [this] { return stopping_ || acknowledged_; })) return;
  const std::string reason = fmt::format("rank {}: {}; aborting the collectives did not end the wait for them "
                                         "within {:g} s, so this process ends here",
                                         rank_, *why, static_cast<double>(options_.abort_grace.count()) / 1000.0);
  lock.unlock();
  if (options_.end_process) {
    options_.end_process(reason);
  } else {
    end_process_after_failed_abort(reason);
  }
}

void end_process_after_failed_abort(const std::string& why) {
  try {
    logger().error("distributed training: {}", why);
    logger().flush();
  } catch (const std::exception&) {
  }
  std::fprintf(stderr, "error: distributed training: %s\n", why.c_str());
  std::fflush(stderr);
  std::_Exit(1);
}

}  // namespace stoker::distributed
