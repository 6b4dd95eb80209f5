#include "recipe/config.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <yaml-cpp/yaml.h>

#include "common/error.h"
#include "common/error_kinds.h"
#include "common/log.h"
#include "data/batch_ops.h"
#include "data/dataset.h"
#include "data/resolution.h"
#include "data/transform_options.h"
#include "models/registry.h"
#include "optim/schedule.h"
#include "parallel/strategy.h"
#include "recipe/config_detail.h"
#include "recipe/legacy_keys.h"
#include "recipe/overrides.h"
#include "recipe/yaml_options.h"
#include "trainer/evaluate.h"

namespace stoker {
namespace {

using namespace rules;

// An enum read and written as one of its names.
template <typename V, typename E>
void choice(V& v, const char* key, E& value, const std::vector<std::pair<std::string, E>>& names) {
  std::vector<std::string> all;
  std::string text;
  for (const auto& [name, e] : names) {
    all.push_back(name);
    if (e == value) text = name;
  }
  v.field(key, text, one_of(all));
  for (const auto& [name, e] : names) {
    if (name == text) value = e;
  }
}

// ---- the mapping, in one place ------------------------------------------------------------------
// One function per section; `v` is the YAML reader or writer (recipe/yaml_options.h).

template <typename V>
void visit_run(Config& c, V& v) {
  v.field("name", c.run.name, matching("[A-Za-z0-9_.-]+", "a name of letters, digits, '_', '.' or '-'"));
  v.field("dir", c.run.dir, non_empty());
  v.field("seed", c.run.seed, non_negative());
  v.field("device", c.run.device, matching("auto|cpu|cuda|cuda:[0-9]+", "auto, cpu, cuda or cuda:N"));
  v.field("threads", c.run.threads, at_least(0));
  v.field("distributed", c.run.distributed, one_of({"auto", "off"}));
}

template <typename V>
void visit_autotune_watch(data::AutotuneWatch& w, V& v) {
  v.field("starved_wait", w.starved_wait, number("a share in (0, 1]", 0, 1, true));
  v.field("fed_wait", w.fed_wait, number("a share in (0, 1]", 0, 1, true));
  v.field("starved_gpu_idle", w.starved_gpu_idle, number("a share in (0, 1]", 0, 1, true));
  v.field("windows", w.windows, at_least(1));
  v.field("cooldown", w.cooldown, at_least(1));
  v.field("worse", w.worse, number("a ratio in (0, 1]", 0, 1, true));
  v.field("max_workers", w.max_workers, at_least(0));
}

template <typename V>
void visit_resolution(data::ResolutionSchedule& r, V& v) {
  v.field("start_size", r.start_size, at_least(0));
  v.field("end_size", r.end_size, at_least(0));
  v.field("start_epoch", r.start_epoch, at_least(0));
  v.field("end_epoch", r.end_epoch, at_least(0));
  v.field("step", r.step, at_least(1));
}

template <typename V>
void visit_data(Config& c, V& v) {
  static const TypeCatalog transforms = catalog_of(data::transform_registry(), "transform");
  static const TypeCatalog datasets = catalog_of(data::dataset_registry(), "data set");
  static const TypeCatalog batch_ops = catalog_of(data::batch_op_registry(), "batch operation");
  v.typed(c.data.dataset, datasets, TypedLayout::kOwnSection);
  v.field("root", c.data.root, described("a folder path"));
  v.field("num_classes", c.data.num_classes, number("0 (from the data) or a whole number >= 2", 0));
  v.field("val_split", c.data.val_split, number("a share in [0, 1)", 0, 1, false, true));
  v.field("batch_size", c.data.batch_size, at_least(1));
  v.field("eval_batch_size", c.data.eval_batch_size, at_least(1));
  v.field("shuffle", c.data.shuffle);
  v.field("drop_last", c.data.drop_last);
  v.field("repeated_augmentation", c.data.repeated_augmentation, at_least(1));
  v.field("workers", c.data.workers, at_least(0));
  v.field("prefetch_factor", c.data.prefetch_factor, at_least(1));
  v.field("device_prefetch", c.data.device_prefetch, at_least(1));
  v.field("pin_memory", c.data.pin_memory);
  v.field("max_image_pixels", c.data.max_image_pixels, at_least(1));
  choice(v, "cache", c.data.cache,
         {{"none", data::DataCache::kNone}, {"raw", data::DataCache::kRaw}, {"decoded", data::DataCache::kDecoded}});
  v.field("autotune", c.data.autotune, one_of({"off", "start", "continuous"}));
  v.field("autotune_budget_s", c.data.autotune_budget_s, positive());
  v.field("autotune_max_share", c.data.autotune_max_share, number("a share of the run in (0, 1]", 0, 1, true));
  choice(v, "on_bad_sample", c.data.on_bad_sample, {{"skip", data::BadSamples::kSkip}, {"error", data::BadSamples::kError}});
  v.typed_list("train_transforms", c.data.train_transforms, transforms);
  v.typed_list("eval_transforms", c.data.eval_transforms, transforms);
  v.field("eval_size", c.data.eval_size, at_least(0));
  v.section("resolution_schedule", [&] { visit_resolution(c.data.resolution_schedule, v); });
  v.field("mean", c.data.mean, items(any_number(), 1));
  v.field("std", c.data.std, items(positive(), 1));
  v.field("train_limit", c.data.train_limit, at_least(0));
  v.field("test_limit", c.data.test_limit, at_least(0));
  v.field("shard_rank", c.data.shard_rank, at_least(0));
  v.field("shard_count", c.data.shard_count, at_least(1));
  v.typed_list("batch_ops", c.data.batch_ops, batch_ops);
  v.section("autotune_continuous", [&] { visit_autotune_watch(c.data.autotune_continuous, v); });
}

template <typename V>
void visit_model(Config& c, V& v) {
  static const TypeCatalog models = catalog_of(models::model_registry(), "model");
  v.typed(c.model, models, TypedLayout::kBeside);
  v.field("pretrained", c.pretrained.file, described("a weights file (torch.save state dict, .safetensors or a "
                                                      "Stoker checkpoint), or nothing"));
  v.field("pretrained_skip", c.pretrained.skip, items(non_empty(), 0));
  v.field("pretrained_rename", c.pretrained.rename, described("a key prefix"));
  v.field("freeze", c.freeze.patterns, items(non_empty(), 0));
  v.field("freeze_until_epoch", c.freeze.until_epoch, at_least(0));
  v.all_or_list("activation_checkpointing", c.activation_checkpointing.all, c.activation_checkpointing.indices,
                described("true, false or a list of block indices (integers >= 0)"));
}

template <typename V>
void visit_optimizer(Config& c, V& v) {
  static const TypeCatalog optimizers = catalog_of(optimizer_registry(), "optimizer");
  v.typed(c.optimizer.algorithm, optimizers, TypedLayout::kBeside);
  v.field("lr", c.optimizer.lr, positive());
  v.field("weight_decay", c.optimizer.weight_decay, non_negative());
  v.field("decay_norm_and_bias", c.optimizer.decay_norm_and_bias);
  v.field("implementation", c.optimizer.implementation, one_of({"auto", "fused", "foreach", "reference"}));
  v.field("lr_reference_batch", c.optimizer.lr_reference_batch, at_least(0));
  v.field("layer_decay", c.optimizer.layer_decay, number("0 (off) or a decay in (0, 1], e.g. 0.75", 0, 1));
  v.field("head_lr_scale", c.optimizer.head_lr_scale, positive());
}

template <typename V>
void visit_loss(Config& c, V& v) {
  static const TypeCatalog losses = catalog_of(loss_registry(), "loss");
  v.typed(c.loss, losses, TypedLayout::kBeside);
}

template <typename V>
void visit_schedule(Config& c, V& v) {
  static const TypeCatalog schedules = catalog_of(schedule_registry(), "schedule");
  v.typed(c.schedule.curve, schedules, TypedLayout::kBeside);
  v.field("warmup_epochs", c.schedule.warmup_epochs, non_negative());
}

template <typename V>
void visit_train(Config& c, V& v) {
  v.field("epochs", c.train.epochs, at_least(1));
  choice(v, "precision", c.train.precision, precision_names());
  v.section("loss_scale", [&] {
    v.field("init_scale", c.train.loss_scale.init_scale, positive());
    v.field("growth_factor", c.train.loss_scale.growth_factor, number("a number > 1", 1, INFINITY, true));
    v.field("backoff_factor", c.train.loss_scale.backoff_factor, number("a number in (0, 1)", 0, 1, true, true));
    v.field("growth_interval", c.train.loss_scale.growth_interval, at_least(1));
  });
  v.field("accumulate_steps", c.train.accumulate_steps, at_least(1));
  v.field("effective_batch_size", c.train.effective_batch_size, at_least(0));
  v.field("strict_sizes", c.train.strict_sizes);
  v.field("cuda_graph", c.train.cuda_graph);
  v.field("cudnn_benchmark", c.train.cudnn_benchmark);
  v.field("label_smoothing", c.train.label_smoothing, unit_open());
  v.field("grad_clip_norm", c.train.grad_clip_norm, non_negative());
  v.field("channels_last", c.train.channels_last);
  v.field("log_every_steps", c.train.log_every_steps, at_least(1));
  v.field("ema_decay", c.train.ema_decay, unit_open());
  v.field("ema_warmup", c.train.ema_warmup);
  v.section("trace", [&] {
    v.field("start_step", c.train.trace.start_step, at_least(0));
    v.field("steps", c.train.trace.steps, at_least(0));
  });
  choice(v, "on_nonfinite", c.train.on_nonfinite, {{"stop", OnNonfinite::kStop}, {"skip", OnNonfinite::kSkip}});
  v.field("max_nonfinite_skips", c.train.max_nonfinite_skips, at_least(1));
  v.section("early_stopping", [&] {
    v.field("metric", c.train.early_stopping.metric, one_of(epoch_metric_names()));
    v.field("patience", c.train.early_stopping.patience, at_least(0));
    v.field("min_delta", c.train.early_stopping.min_delta, non_negative());
  });
}

template <typename V>
void visit_distributed(Config& c, V& v) {
  std::vector<std::string> strategies = {"auto"};
  for (const auto& name : parallel::strategy_registry().names()) strategies.push_back(name);
  v.field("strategy", c.distributed.strategy, one_of(strategies));
  v.field("sync_batchnorm", c.distributed.sync_batchnorm);
  v.field("eval_bn", c.distributed.eval_bn, one_of({"broadcast", "reduce"}));
  v.field("shard_optimizer", c.distributed.shard_optimizer);
}

template <typename V>
void visit_checkpoint(Config& c, V& v) {
  v.field("save_last", c.checkpoint.save_last);
  v.field("save_best", c.checkpoint.save_best);
  v.field("best_metric", c.checkpoint.best_metric, one_of(epoch_metric_names()));
  v.field("every_steps", c.checkpoint.every_steps, at_least(0));
}

template <typename V>
void visit_logging(Config& c, V& v) {
  static const TypeCatalog sinks = catalog_of(sink_registry(), "metrics sink");
  v.typed_list("sinks", c.logging.sinks, sinks);
  v.field("telemetry", c.logging.telemetry);
  v.field("telemetry_interval_s", c.logging.telemetry_interval_s, positive());
  v.field("flops", c.logging.flops);
  v.field("sample_digests", c.logging.sample_digests);
}

// Every key Stoker reads is named here once; the reader, the writer and the checks all use it.
template <typename V>
void visit_config(Config& c, V& v) {
  v.section("run", [&] { visit_run(c, v); });
  v.section("data", [&] { visit_data(c, v); });
  v.section("model", [&] { visit_model(c, v); });
  v.section("optimizer", [&] { visit_optimizer(c, v); });
  v.section("loss", [&] { visit_loss(c, v); });
  v.section("schedule", [&] { visit_schedule(c, v); });
  v.section("train", [&] { visit_train(c, v); });
  v.section("distributed", [&] { visit_distributed(c, v); });
  v.section("checkpoint", [&] { visit_checkpoint(c, v); });
  v.section("logging", [&] { visit_logging(c, v); });
}

// ---- cross-field checks -------------------------------------------------------------------------

// Each throws stoker::Error with the message `fail` is given (prefixed with the file).
using Fail = std::function<void(const std::string&)>;

// data.resolution_schedule and data.eval_size: well formed, with transforms whose size they can set.
void check_resolution(const Config& c, const Fail& fail) {
  const data::ResolutionSchedule& r = c.data.resolution_schedule;
  if (!r.enabled() && r.end_size > 0) {
    fail("data.resolution_schedule has an end_size but no start_size; give both (or neither)");
  }
  try {
    r.check();
  } catch (const Error& e) {
    fail(fmt::format("data.resolution_schedule: {}", e.what()));
  }
  if (r.enabled() && data::output_size_of(c.data.train_transforms) == 0) {
    fail(fmt::format("data.resolution_schedule sets the size of the training crops, but data.train_transforms has "
                     "no random_resized_crop, random_crop, center_crop or resize; add one, e.g. {{type: "
                     "random_resized_crop, size: {}}}",
                     r.start_size));
  }
  if (c.data.eval_size > 0 && data::output_size_of(c.data.eval_transforms) == 0) {
    fail(fmt::format("data.eval_size ({}) sets the size of the evaluation crops, but data.eval_transforms has no "
                     "center_crop or resize; add them, e.g. [{{type: resize, size: {}}}, {{type: center_crop, "
                     "size: {}}}]",
                     c.data.eval_size, c.data.eval_size * 8 / 7, c.data.eval_size));
  }
}

void check_data_and_model(const Config& c, const Fail& fail) {
  if (c.data.num_classes == 1) {
    fail("data.num_classes is 1: a classifier needs at least 2 classes; leave it out (or 0) to take the number "
         "from the data");
  }
  if (c.data.mean.size() != c.data.std.size()) {
    fail(fmt::format("data.mean has {} value(s) but data.std has {}; give one of each per channel",
                     c.data.mean.size(), c.data.std.size()));
  }
  const data::AutotuneWatch& w = c.data.autotune_continuous;
  if (w.fed_wait > w.starved_wait) {
    fail(fmt::format("data.autotune_continuous.fed_wait ({}) must not be above starved_wait ({}): a window between "
                     "the two neither starts nor ends a streak",
                     w.fed_wait, w.starved_wait));
  }
  check_resolution(c, fail);
  if (c.data.shard_rank >= c.data.shard_count) {
    fail(fmt::format("data.shard_rank ({}) must be below data.shard_count ({})", c.data.shard_rank,
                     c.data.shard_count));
  }
}

void check_batching(const Config& c, const Fail& fail) {
  const std::string problem = batch_arithmetic(c).problem;
  if (!problem.empty()) fail(problem);
}

void check_schedule_and_metrics(const Config& c, const Fail& fail) {
  if (c.schedule.warmup_epochs >= static_cast<double>(c.train.epochs)) {
    fail(fmt::format("schedule.warmup_epochs ({}) must be shorter than train.epochs ({})",
                     c.schedule.warmup_epochs, c.train.epochs));
  }
  const std::string& name = c.schedule.curve.type();
  const ScheduleType type = schedule_registry().get(name);
  if (type.check_run) {
    try {
      type.check_run(c.schedule.curve.options(), c.schedule.warmup_epochs, c.train.epochs);
    } catch (const Error& e) {
      fail(e.what());
    }
  }
  if (type.own_warmup && c.schedule.warmup_epochs > 0) {
    fail(fmt::format("schedule.type: {} warms up by itself{}; set schedule.warmup_epochs: 0", name,
                     type.warmup_key.empty() ? "" : fmt::format(" (schedule.{})", type.warmup_key)));
  }
  auto check_ema_metric = [&](const char* key, const std::string& metric) {
    if (metric.rfind("ema_", 0) == 0 && c.train.ema_decay == 0) {
      fail(fmt::format("{} is {}, but there is no EMA of the weights; set train.ema_decay (e.g. "
                       "0.9998) or pick a test_* metric",
                       key, metric));
    }
  };
  check_ema_metric("checkpoint.best_metric", c.checkpoint.best_metric);
  check_ema_metric("train.early_stopping.metric", c.train.early_stopping.metric);
}

void check_consistency(const Config& c, const std::string& source) {
  const Fail fail = [&](const std::string& msg) { throw Error(fmt::format("{}: {}", source, msg)); };
  check_data_and_model(c, fail);
  check_finetuning_keys(c, fail);  // recipe/config_detail.h
  check_distributed_keys(c, fail);
  check_batching(c, fail);
  check_schedule_and_metrics(c, fail);
}

}  // namespace

BatchArithmetic batch_arithmetic(const Config& c, int64_t world_size) {
  BatchArithmetic a;
  a.shards = world_size > 1 ? world_size : c.data.shard_count;
  a.per_step_batch = c.data.batch_size * a.shards;
  const int64_t effective = c.train.effective_batch_size;
  a.accumulate_steps = effective > 0 ? std::max<int64_t>(1, effective / a.per_step_batch) : c.train.accumulate_steps;
  a.global_batch = a.per_step_batch * a.accumulate_steps;
  const int64_t reference = c.optimizer.lr_reference_batch;
  a.lr = reference > 0 ? c.optimizer.lr * static_cast<double>(a.global_batch) / static_cast<double>(reference)
                       : c.optimizer.lr;
  const char* ranks = world_size > 1 ? "the ranks" : "data.shard_count";
  if (effective > 0 && effective % a.per_step_batch != 0) {
    a.problem = fmt::format("train.effective_batch_size ({}) must be a multiple of data.batch_size x {} ({} x {} = "
                            "{}); use {} or {}",
                            effective, ranks, c.data.batch_size, a.shards, a.per_step_batch,
                            std::max(a.per_step_batch, effective / a.per_step_batch * a.per_step_batch),
                            (effective / a.per_step_batch + 1) * a.per_step_batch);
  } else if (effective > 0 && c.train.accumulate_steps != 1 && c.train.accumulate_steps != a.accumulate_steps) {
    a.problem = fmt::format("train.accumulate_steps ({}) disagrees with train.effective_batch_size ({} = {} "
                            "accumulated batches of {}); set only one of them",
                            c.train.accumulate_steps, effective, a.accumulate_steps, a.per_step_batch);
  }
  return a;
}

namespace {
Config parse_config_text(const std::string& yaml_text, const std::string& source,
                         const std::vector<std::string>& overrides, std::vector<std::string>* notes) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::ParserException& e) {
    throw Error(fmt::format("{}: invalid YAML at line {}, column {}: {}", source, e.mark.line + 1,
                            e.mark.column + 1, e.msg));
  }
  AppliedOverrides applied = apply_overrides(root, overrides, source);
  std::vector<std::string> said = std::move(applied.notes);
  rewrite_legacy_keys(root, source, said);
  Config config;
  YamlReader reader(root, source, std::move(applied));
  visit_config(config, reader);
  reader.check_top_level();
  // A check across keys may fail because of a --set as well as of the file: name both.
  check_consistency(config, overrides.empty() ? source
                                              : fmt::format("{} with --set {}", source, fmt::join(overrides, " --set ")));
  said.insert(said.end(), reader.notes().begin(), reader.notes().end());
  for (const std::string& note : said) {
    if (notes != nullptr) {
      notes->push_back(note);
    } else {
      logger().info("{}", note);
    }
  }
  return config;
}
}  // namespace

// Every error of reading a recipe is the recipe's (an InvalidValueError), but a file it names that
// does not exist.
Config parse_config(const std::string& yaml_text, const std::string& source,
                    const std::vector<std::string>& overrides, std::vector<std::string>* notes) {
  try {
    return parse_config_text(yaml_text, source, overrides, notes);
  } catch (const NotFoundError&) {
    throw;
  } catch (const InvalidValueError&) {
    throw;
  } catch (const Error& e) {
    throw InvalidValueError(e.what(), e.location());
  }
}

Config load_config(const std::filesystem::path& path, const std::vector<std::string>& overrides,
                   std::vector<std::string>* notes) {
  if (std::filesystem::is_directory(path)) {
    throw Error(fmt::format("{} is a folder; --config takes a recipe file (a .yaml file, e.g. a copy of "
                            "configs/fashion_mnist.yaml); a folder of images goes in the recipe's data.root "
                            "(or --set data.root={})",
                            path.string(), path.string()));
  }
  std::ifstream in(path);
  if (!in && !std::filesystem::exists(path)) {
    throw NotFoundError(fmt::format("{}: cannot read the config file (no such file); check the path given to --config",
                                    path.string()));
  }
  if (!in) throw Error(fmt::format("{}: cannot read the config file (permission denied)", path.string()));
  std::stringstream text;
  text << in.rdbuf();
  // An empty recipe would train every default (Fashion-MNIST into runs/run/): almost surely a mistake.
  YAML::Node document;
  try {
    document = YAML::Load(text.str());
  } catch (const YAML::Exception&) {
    // parse_config reports the line and column
  }
  if (document.IsNull()) {
    throw Error(fmt::format("{} is empty (nothing but comments or blank lines); a recipe sets at least its data and "
                            "model: start from a copy of one in configs/ (configs/fashion_mnist.yaml is the default)",
                            path.string()));
  }
  return parse_config(text.str(), path.string(), overrides, notes);
}

namespace {

// Every key of a resolved config's YAML with its value on one line, in order; a list is one value.
void flatten(const YAML::Node& node, const std::string& prefix, std::vector<std::pair<std::string, std::string>>& out) {
  if (node.IsMap()) {
    for (const auto& item : node) {
      const std::string key = item.first.as<std::string>();
      flatten(item.second, prefix.empty() ? key : prefix + "." + key, out);
    }
    return;
  }
  YAML::Emitter e;
  e << YAML::Flow << node;
  out.emplace_back(prefix, e.c_str());
}

bool breaks_exactness(const std::string& key) {
  static const std::set<std::string> loader_only = {"data.workers", "data.prefetch_factor", "data.device_prefetch",
                                                    "data.pin_memory", "data.autotune", "data.autotune_budget_s",
                                                    "data.autotune_max_share"};
  static const std::set<std::string> exact = {"optimizer.type", "optimizer.layer_decay", "optimizer.head_lr_scale",
                                              "loss.type", "train.epochs", "train.accumulate_steps",
                                              "train.effective_batch_size", "train.precision", "run.seed",
                                              "distributed.sync_batchnorm", "distributed.eval_bn"};
  auto under = [&](const char* section) { return key.rfind(section, 0) == 0; };
  if (under("data.autotune_continuous.")) return false;
  // The same values recomputed in backward: the run continues exactly.
  if (key == "model.activation_checkpointing") return false;
  if (under("data.")) return loader_only.count(key) == 0;
  return under("model.") || under("schedule.") || exact.count(key) > 0;
}

}  // namespace

std::vector<ConfigDifference> config_differences(const Config& before, const Config& after) {
  std::vector<std::pair<std::string, std::string>> a, b;
  flatten(YAML::Load(config_to_yaml(before)), "", a);
  flatten(YAML::Load(config_to_yaml(after)), "", b);
  const std::map<std::string, std::string> a_by_key(a.begin(), a.end()), b_by_key(b.begin(), b.end());
  std::vector<ConfigDifference> out;
  auto add = [&](const std::string& key, const std::string& was, const std::string& is) {
    if (was != is) out.push_back({key, was, is, breaks_exactness(key)});
  };
  for (const auto& [key, value] : a) {
    const auto it = b_by_key.find(key);
    add(key, value, it == b_by_key.end() ? "(absent)" : it->second);
  }
  for (const auto& [key, value] : b) {
    if (a_by_key.count(key) == 0) add(key, "(absent)", value);
  }
  return out;
}

std::string config_to_yaml(const Config& config) {
  Config copy = config;  // the visitors take every value by reference
  YamlWriter writer;
  visit_config(copy, writer);
  return writer.str();
}

}  // namespace stoker
