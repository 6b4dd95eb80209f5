#include "common/trace.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "common/atomic_write.h"

namespace stoker::trace {
namespace {

struct Event {
  const char* name;
  int64_t begin_ns, end_ns;
};

// One thread's track. Tracks live as long as the process (a thread that ended keeps its events).
struct Track {
  int64_t id = 0;
  std::string name;
  std::mutex mutex;
  std::vector<Event> events;
};

std::atomic<bool> g_on{false};
std::atomic<int64_t> g_origin_ns{0};
std::mutex g_tracks_mutex;
std::vector<std::unique_ptr<Track>>& tracks() {
  static auto* all = new std::vector<std::unique_ptr<Track>>();  // never destroyed: threads may outlive main
  return *all;
}

Track& this_track() {
  thread_local Track* track = nullptr;
  if (track == nullptr) {
    std::lock_guard<std::mutex> lock(g_tracks_mutex);
    tracks().push_back(std::make_unique<Track>());
    track = tracks().back().get();
    track->id = static_cast<int64_t>(tracks().size());
    track->name = fmt::format("thread {}", track->id);
  }
  return *track;
}

std::string escaped(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) out += c;
  }
  return out;
}

}  // namespace

bool enabled() { return g_on.load(std::memory_order_relaxed); }

void start() {
  std::lock_guard<std::mutex> lock(g_tracks_mutex);
  for (auto& t : tracks()) {
    std::lock_guard<std::mutex> track_lock(t->mutex);
    t->events.clear();
  }
  g_origin_ns = now_ns();
  g_on = true;
}

void stop() { g_on = false; }

void name_thread(const std::string& name) {
  Track& t = this_track();
  std::lock_guard<std::mutex> lock(t.mutex);
  t.name = name;
}

void record(const char* name, int64_t begin_ns, int64_t end_ns) {
  if (!enabled()) return;
  Track& t = this_track();
  std::lock_guard<std::mutex> lock(t.mutex);
  t.events.push_back({name, begin_ns, end_ns});
}

int64_t event_count() {
  std::lock_guard<std::mutex> lock(g_tracks_mutex);
  int64_t n = 0;
  for (auto& t : tracks()) {
    std::lock_guard<std::mutex> track_lock(t->mutex);
    n += static_cast<int64_t>(t->events.size());
  }
  return n;
}

void write(const std::filesystem::path& path) {
  const int pid = static_cast<int>(::getpid());
  const int64_t origin = g_origin_ns.load();
  std::string json = "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
  bool first = true;
  auto add = [&](const std::string& event) {
    json += (first ? "" : ",\n") + event;
    first = false;
  };
  std::lock_guard<std::mutex> lock(g_tracks_mutex);
  for (auto& t : tracks()) {
    std::lock_guard<std::mutex> track_lock(t->mutex);
    if (t->events.empty()) continue;
    add(fmt::format(R"({{"name":"thread_name","ph":"M","pid":{},"tid":{},"args":{{"name":"{}"}}}})", pid, t->id,
                    escaped(t->name)));
    for (const Event& e : t->events) {
      add(fmt::format(R"({{"name":"{}","ph":"X","pid":{},"tid":{},"ts":{:.3f},"dur":{:.3f}}})", escaped(e.name), pid,
                      t->id, static_cast<double>(e.begin_ns - origin) * 1e-3,
                      static_cast<double>(e.end_ns - e.begin_ns) * 1e-3));
    }
  }
  json += "\n]}\n";
  write_file_atomically(path, json);
}

}  // namespace stoker::trace
