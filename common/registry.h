// A name -> entry registry, used for the registered types, and lazy_registry, which builds each
// process-wide one on first use. Registering a name twice is an error; a failed lookup lists the names
// it knows. Thread-safe: applications may register from static initialisers or at run time.
//
// Stoker's nine process-wide registries, each a lazy_registry filled with Stoker's own entries:
//   batch operation  data::batch_op_registry()         data/batch_ops.cpp
//   dataset          data::dataset_registry()          data/datasets.cpp
//   transform        data::transform_registry()        data/transform_options.cpp
//   model            models::model_registry()          models/registry.cpp
//   ONNX exporter    models::onnx_exporter_registry()  models/registry.cpp
//   optimizer        optimizer_registry()              optim/optimizers.cpp
//   schedule         schedule_registry()               optim/schedule.cpp
//   loss             loss_registry()                   trainer/losses.cpp
//   metrics sink     sink_registry()                   observe/sinks.cpp
#pragma once

#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/error.h"

namespace stoker {

template <typename Factory>
class Registry {
 public:
  // `kind` names what is registered ("model"), for error messages.
  explicit Registry(std::string kind) : kind_(std::move(kind)) {}

  void add(const std::string& name, Factory factory) {
    std::lock_guard<std::mutex> lock(mutex_);
    STOKER_CHECK(!name.empty(), "cannot register a {} with an empty name", kind_);
    auto [it, inserted] = entries_.emplace(name, std::move(factory));
    (void)it;
    STOKER_CHECK(inserted, "a {} named '{}' is already registered; pick another name", kind_, name);
  }

  bool contains(const std::string& name) const {
    std::lock_guard<std::mutex> lock(mutex_);
    return entries_.count(name) > 0;
  }

  // Returns a copy of the factory registered under `name`, or throws naming the known ones.
  Factory get(const std::string& name) const {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = entries_.find(name);
    if (it == entries_.end()) {
      throw Error(fmt::format("unknown {} type '{}'; known: {}", kind_, name,
                              fmt::join(names_locked(), ", ")));
    }
    return it->second;
  }

  std::vector<std::string> names() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return names_locked();
  }

 private:
  std::vector<std::string> names_locked() const {
    std::vector<std::string> out;
    for (const auto& [name, factory] : entries_) out.push_back(name);
    return out;
  }

  std::string kind_;
  mutable std::mutex mutex_;
  std::map<std::string, Factory> entries_;
};

// The process-wide registry of one kind (`kind` names it in messages: "model"), built on the first
// call by `Fill` (which adds Stoker's own entries) and never destroyed, so that an application may add
// its entries from a static initialiser in any order, before or after the first lookup. One registry
// per `Fill`: each accessor passes its own,
//   Registry<SinkType>& sink_registry() { return lazy_registry<SinkType, add_stoker_sinks>("metrics sink"); }
template <typename Entry, void (*Fill)(Registry<Entry>&)>
Registry<Entry>& lazy_registry(const char* kind) {
  static Registry<Entry>* registry = [kind] {
    auto* r = new Registry<Entry>(kind);
    Fill(*r);
    return r;
  }();
  return *registry;
}

}  // namespace stoker
