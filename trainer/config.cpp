#include "trainer/config.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <yaml-cpp/yaml.h>

#include "common/error.h"
#include "data/dataset.h"
#include "models/compact_resnet.h"
#include "trainer/schedule.h"

namespace stoker {
namespace {

// ---- rules: what a value must be, and how to say it ---------------------------------------------

struct Rule {
  std::string expected;  // "a positive number", used in messages
  double lo = -std::numeric_limits<double>::infinity();
  double hi = std::numeric_limits<double>::infinity();
  bool lo_open = false, hi_open = false;
  std::vector<std::string> choices;                   // for strings: the allowed values
  std::function<bool(const std::string&)> accepts;    // for strings: a custom test
  size_t min_items = 0, max_items = SIZE_MAX;         // for lists

  bool in_range(double v) const {
    return (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
  }
};

Rule described(std::string expected) {
  Rule r;
  r.expected = std::move(expected);
  return r;
}
Rule number(std::string expected, double lo, double hi = INFINITY, bool lo_open = false,
            bool hi_open = false) {
  Rule r = described(std::move(expected));
  r.lo = lo;
  r.hi = hi;
  r.lo_open = lo_open;
  r.hi_open = hi_open;
  return r;
}
Rule any_number() { return described("a number"); }
Rule positive() { return number("a positive number", 0, INFINITY, true); }
Rule non_negative() { return number("a number >= 0", 0); }
Rule at_least(int64_t n) { return number(fmt::format("an integer >= {}", n), double(n)); }
Rule unit_open() { return number("a number in [0, 1)", 0, 1, false, true); }
Rule unit_closed() { return number("a number in [0, 1]", 0, 1); }
Rule one_of(std::vector<std::string> choices) {
  Rule r = described(fmt::format("one of: {}", fmt::join(choices, ", ")));
  r.choices = std::move(choices);
  return r;
}
Rule non_empty() {
  Rule r = described("a non-empty string");
  r.accepts = [](const std::string& s) { return !s.empty(); };
  return r;
}
Rule matching(const char* pattern, std::string expected) {
  Rule r = described(std::move(expected));
  r.accepts = [re = std::regex(pattern)](const std::string& s) { return std::regex_match(s, re); };
  return r;
}
Rule items(Rule r, size_t min_items, size_t max_items = SIZE_MAX) {
  r.min_items = min_items;
  r.max_items = max_items;
  return r;
}

// The epoch metrics a config may name (checkpoint.best_metric, train.early_stopping.metric).
const std::vector<std::string>& epoch_metrics() {
  static const std::vector<std::string> kNames = {"test_top1",     "test_top5",     "test_loss",
                                                  "ema_test_top1", "ema_test_top5", "ema_test_loss"};
  return kNames;
}

// ---- the mapping, in one place ------------------------------------------------------------------
// Every key Stoker reads is named here once; the reader, the writer and the checks all use it.

template <typename C, typename V>
void visit_config(C& c, V& v) {
  v.section("run", [&] {
    v.field("name", c.run.name, matching("[A-Za-z0-9_.-]+", "a name of letters, digits, '_', '.' or '-'"));
    v.field("dir", c.run.dir, non_empty());
    v.field("seed", c.run.seed, non_negative());
    v.field("device", c.run.device, matching("auto|cpu|cuda|cuda:[0-9]+", "auto, cpu, cuda or cuda:N"));
    v.field("threads", c.run.threads, at_least(0));
  });
  v.section("data", [&] {
    Rule known_dataset = non_empty();
    known_dataset.expected = fmt::format("a registered data set type ({})",
                                         fmt::join(data::dataset_registry().names(), ", "));
    known_dataset.accepts = [](const std::string& s) { return data::dataset_registry().contains(s); };
    v.field("type", c.data.type, known_dataset);
    v.field("root", c.data.root, described("a folder path"));
    v.field("num_classes", c.data.num_classes, at_least(2));
    v.field("batch_size", c.data.batch_size, at_least(1));
    v.field("eval_batch_size", c.data.eval_batch_size, at_least(1));
    v.field("shuffle", c.data.shuffle);
    v.field("drop_last", c.data.drop_last);
    v.field("workers", c.data.workers, at_least(0));
    v.field("prefetch_factor", c.data.prefetch_factor, at_least(1));
    v.field("device_prefetch", c.data.device_prefetch, at_least(1));
    v.field("pin_memory", c.data.pin_memory);
    v.field("on_bad_sample", c.data.on_bad_sample, one_of({"skip", "error"}));
    v.field("train_transforms", c.data.train_transforms, described("a list of transforms"));
    v.field("eval_transforms", c.data.eval_transforms, described("a list of transforms"));
    v.field("mean", c.data.mean, items(any_number(), 1));
    v.field("std", c.data.std, items(positive(), 1));
    v.field("train_limit", c.data.train_limit, at_least(0));
    v.field("test_limit", c.data.test_limit, at_least(0));
    v.field("shard_rank", c.data.shard_rank, at_least(0));
    v.field("shard_count", c.data.shard_count, at_least(1));
    v.section("synthetic", [&] {
      v.field("train_samples", c.data.synthetic.train_samples, at_least(1));
      v.field("test_samples", c.data.synthetic.test_samples, at_least(1));
      v.field("height", c.data.synthetic.height, at_least(1));
      v.field("width", c.data.synthetic.width, at_least(1));
      v.field("channels", c.data.synthetic.channels, number("1 or 3", 1, 3));
      v.field("cpu_cost_us", c.data.synthetic.cpu_cost_us, at_least(0));
    });
  });
  v.section("model", [&] {
    Rule known_model = non_empty();
    known_model.expected = fmt::format("a registered model type ({})",
                                       fmt::join(models::model_registry().names(), ", "));
    known_model.accepts = [](const std::string& s) { return models::model_registry().contains(s); };
    v.field("type", c.model.type, known_model);
    v.field("widths", c.model.widths, items(at_least(1), 1));
    v.field("blocks", c.model.blocks, items(at_least(1), 1));
    v.field("dropout", c.model.dropout, unit_open());
  });
  v.section("optimizer", [&] {
    v.field("type", c.optimizer.type, one_of({"sgd", "adamw"}));
    v.field("lr", c.optimizer.lr, positive());
    v.field("momentum", c.optimizer.momentum, unit_open());
    v.field("nesterov", c.optimizer.nesterov);
    v.field("betas", c.optimizer.betas, items(unit_open(), 2, 2));
    v.field("eps", c.optimizer.eps, positive());
    v.field("weight_decay", c.optimizer.weight_decay, non_negative());
    v.field("decay_norm_and_bias", c.optimizer.decay_norm_and_bias);
    v.field("implementation", c.optimizer.implementation, one_of({"auto", "fused", "foreach", "reference"}));
    v.field("lr_reference_batch", c.optimizer.lr_reference_batch, at_least(0));
  });
  v.section("schedule", [&] {
    Rule known_schedule = non_empty();
    known_schedule.expected =
        fmt::format("a registered schedule type ({})", fmt::join(schedule_registry().names(), ", "));
    known_schedule.accepts = [](const std::string& s) { return schedule_registry().contains(s); };
    v.field("type", c.schedule.type, known_schedule);
    v.field("warmup_epochs", c.schedule.warmup_epochs, non_negative());
    v.field("final_lr_ratio", c.schedule.final_lr_ratio, unit_closed());
    v.field("milestones", c.schedule.milestones, items(at_least(1), 0));
    v.field("gamma", c.schedule.gamma, number("a number in (0, 1]", 0, 1, true));
    v.field("pct_start", c.schedule.pct_start, number("a number in (0, 1)", 0, 1, true, true));
    v.field("div_factor", c.schedule.div_factor, number("a number >= 1", 1));
    v.field("final_div_factor", c.schedule.final_div_factor, number("a number >= 1", 1));
  });
  v.section("train", [&] {
    v.field("epochs", c.train.epochs, at_least(1));
    v.field("precision", c.train.precision, one_of({"fp32", "tf32", "bf16-mixed", "fp16-mixed", "bf16-true"}));
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
    v.field("label_smoothing", c.train.label_smoothing, unit_open());
    v.field("grad_clip_norm", c.train.grad_clip_norm, non_negative());
    v.field("channels_last", c.train.channels_last);
    v.field("log_every_steps", c.train.log_every_steps, at_least(1));
    v.field("ema_decay", c.train.ema_decay, unit_open());
    v.field("ema_warmup", c.train.ema_warmup);
    v.section("early_stopping", [&] {
      v.field("metric", c.train.early_stopping.metric, one_of(epoch_metrics()));
      v.field("patience", c.train.early_stopping.patience, at_least(0));
      v.field("min_delta", c.train.early_stopping.min_delta, non_negative());
    });
  });
  v.section("checkpoint", [&] {
    v.field("save_last", c.checkpoint.save_last);
    v.field("save_best", c.checkpoint.save_best);
    v.field("best_metric", c.checkpoint.best_metric, one_of(epoch_metrics()));
    v.field("every_steps", c.checkpoint.every_steps, at_least(0));
  });
}

// ---- reading ------------------------------------------------------------------------------------

std::string quote(const YAML::Node& node) {
  if (!node.IsDefined() || node.IsNull()) return "nothing";
  if (node.IsScalar()) return fmt::format("\"{}\"", node.Scalar());
  if (node.IsSequence()) return "a list";
  return "a mapping";
}

class Reader {
 public:
  Reader(YAML::Node root, std::string source, std::set<std::string> overridden)
      : source_(std::move(source)), overridden_(std::move(overridden)) {
    frames_.push_back(Frame{root, "", {}});
  }

  template <typename Body>
  void section(const char* key, Body body) {
    Frame& parent = frames_.back();
    parent.keys.insert(key);
    const std::string path = join(parent.prefix, key);
    const bool in_map = parent.node.IsDefined() && parent.node.IsMap();
    // A missing section reads as null: all defaults.
    const YAML::Node node = in_map ? YAML::Node(const_cast<const YAML::Node&>(parent.node)[key]) : YAML::Node();
    if (node.IsDefined() && !node.IsNull() && !node.IsMap()) fail(node, path, "a mapping of keys", quote(node));
    frames_.push_back(Frame{node, path, {}});
    body();
    check_unknown_keys(frames_.back());
    frames_.pop_back();
  }

  template <typename T>
  void field(const char* key, T& value, const Rule& rule = described("true or false")) {
    Frame& frame = frames_.back();
    frame.keys.insert(key);
    if (!frame.node.IsDefined() || !frame.node.IsMap()) return;
    const YAML::Node node = const_cast<const YAML::Node&>(frame.node)[key];
    if (!node.IsDefined()) return;
    read(node, join(frame.prefix, key), value, rule);
  }

  // Top-level keys that are not sections.
  void check_top_level() {
    const YAML::Node& root = frames_.front().node;
    if (!root.IsDefined() || root.IsNull()) return;
    if (!root.IsMap()) fail(root, "(top level)", "a mapping of sections", quote(root));
    check_unknown_keys(frames_.front());
  }

 private:
  struct Frame {
    YAML::Node node;
    std::string prefix;
    std::set<std::string> keys;  // the keys this section knows
  };

  static std::string join(const std::string& prefix, const std::string& key) {
    return prefix.empty() ? key : prefix + "." + key;
  }

  void check_unknown_keys(const Frame& frame) {
    if (!frame.node.IsDefined() || !frame.node.IsMap()) return;
    for (const auto& kv : frame.node) {
      const std::string name = kv.first.as<std::string>();
      if (frame.keys.count(name)) continue;
      if (frame.prefix.empty()) {
        fail(kv.first, name, "", "",
             fmt::format("unknown section '{}'; known sections: {}", name, fmt::join(frame.keys, ", ")));
      }
      fail(kv.first, join(frame.prefix, name), "", "",
           fmt::format("unknown key '{}' in section '{}'; known keys: {}", name, frame.prefix,
                       fmt::join(frame.keys, ", ")));
    }
  }

  [[noreturn]] void fail(const YAML::Node& node, const std::string& path, const std::string& expected,
                         const std::string& got, const std::string& custom = "") const {
    const std::string what =
        custom.empty() ? fmt::format("expected {}, got {}", expected, got) : custom;
    // A value from --set is reported as such: its line would point into the override, not the file.
    for (const auto& o : overridden_) {
      if (path == o || path.rfind(o + ".", 0) == 0 || path.rfind(o + "[", 0) == 0) {
        throw Error(fmt::format("--set {}: {}", path, what));
      }
    }
    const auto mark = node.Mark();
    const std::string where = mark.is_null() ? "" : fmt::format(" at line {}", mark.line + 1);
    throw Error(fmt::format("{}: {}{}: {}", source_, path, where, what));
  }

  void read(const YAML::Node& node, const std::string& path, std::vector<data::TransformSpec>& out,
            const Rule&) {
    static const std::map<std::string, std::set<std::string>> kKeys = {
        {"random_resized_crop", {"type", "size", "scale", "ratio"}},
        {"resize", {"type", "size"}},
        {"center_crop", {"type", "size"}},
        {"random_crop", {"type", "size", "padding"}},
        {"horizontal_flip", {"type", "p"}},
    };
    if (!node.IsSequence()) {
      fail(node, path, "a list of transforms, e.g. [{type: horizontal_flip}]", quote(node));
    }
    std::vector<data::TransformSpec> list;
    for (size_t i = 0; i < node.size(); ++i) {
      const YAML::Node item = node[i];
      const std::string at = fmt::format("{}[{}]", path, i);
      if (!item.IsMap()) fail(item, at, "a mapping with a 'type' key", quote(item));
      std::vector<std::string> types;
      for (const auto& [name, keys] : kKeys) types.push_back(name);
      data::TransformSpec t;
      const YAML::Node type = item["type"];
      if (!type.IsDefined()) fail(item, at, "", "", fmt::format("missing 'type' (one of: {})", fmt::join(types, ", ")));
      read(type, at + ".type", t.type, one_of(types));
      const auto& allowed = kKeys.at(t.type);
      for (const auto& kv : item) {
        const std::string name = kv.first.as<std::string>();
        if (!allowed.count(name)) {
          fail(kv.first, at + "." + name, "", "",
               fmt::format("{} does not take '{}'; it takes: {}", t.type, name, fmt::join(allowed, ", ")));
        }
      }
      if (allowed.count("size")) {
        if (!item["size"].IsDefined()) fail(item, at, "", "", fmt::format("{} needs a 'size' (pixels)", t.type));
        read(item["size"], at + ".size", t.size, at_least(1));
      }
      if (item["scale"].IsDefined()) read(item["scale"], at + ".scale", t.scale, items(stoker::number("a number in (0, 1]", 0, 1, true), 2, 2));
      if (item["ratio"].IsDefined()) read(item["ratio"], at + ".ratio", t.ratio, items(positive(), 2, 2));
      if (item["padding"].IsDefined()) read(item["padding"], at + ".padding", t.padding, at_least(0));
      if (item["p"].IsDefined()) read(item["p"], at + ".p", t.p, unit_closed());
      if (t.type == "random_resized_crop" && (t.scale[0] > t.scale[1] || t.ratio[0] > t.ratio[1])) {
        fail(item, at, "", "", "scale and ratio must be [low, high] with low <= high");
      }
      list.push_back(t);
    }
    out = std::move(list);
  }

  void read(const YAML::Node& node, const std::string& path, bool& out, const Rule&) {
    bool v;
    if (!node.IsScalar() || !YAML::convert<bool>::decode(node, v)) fail(node, path, "true or false", quote(node));
    out = v;
  }

  void read(const YAML::Node& node, const std::string& path, std::string& out, const Rule& rule) {
    if (!node.IsScalar()) fail(node, path, rule.expected, quote(node));
    const std::string& s = node.Scalar();
    const bool ok = rule.choices.empty()
                        ? (!rule.accepts || rule.accepts(s))
                        : std::find(rule.choices.begin(), rule.choices.end(), s) != rule.choices.end();
    if (!ok) fail(node, path, rule.expected, quote(node));
    out = s;
  }

  template <typename Number>
  Number number(const YAML::Node& node, const std::string& path, const Rule& rule) {
    Number v{};
    if (!node.IsScalar() || !YAML::convert<Number>::decode(node, v)) fail(node, path, rule.expected, quote(node));
    if constexpr (std::is_floating_point_v<Number>) {
      if (!std::isfinite(v)) fail(node, path, rule.expected, quote(node));
    }
    if (!rule.in_range(static_cast<double>(v))) fail(node, path, rule.expected, quote(node));
    return v;
  }

  void read(const YAML::Node& node, const std::string& path, double& out, const Rule& rule) {
    out = number<double>(node, path, rule);
  }
  void read(const YAML::Node& node, const std::string& path, int64_t& out, const Rule& rule) {
    out = number<int64_t>(node, path, rule);
  }
  void read(const YAML::Node& node, const std::string& path, uint64_t& out, const Rule& rule) {
    if (node.IsScalar() && !node.Scalar().empty() && node.Scalar()[0] == '-') {
      fail(node, path, "an integer >= 0", quote(node));
    }
    Rule r = rule;
    r.expected = "an integer >= 0";
    out = number<uint64_t>(node, path, r);
  }

  template <typename T>
  void read(const YAML::Node& node, const std::string& path, std::vector<T>& out, const Rule& rule) {
    const std::string expected =
        rule.min_items == 0 ? fmt::format("a list of values, each {}", rule.expected)
        : rule.min_items == rule.max_items
            ? fmt::format("a list of {} values, each {}", rule.min_items, rule.expected)
            : fmt::format("a list of at least {} value(s), each {}", rule.min_items, rule.expected);
    if (!node.IsSequence()) fail(node, path, expected, quote(node));
    if (node.size() < rule.min_items || node.size() > rule.max_items) {
      fail(node, path, expected, fmt::format("{} value(s)", node.size()));
    }
    std::vector<T> values;
    for (size_t i = 0; i < node.size(); ++i) {
      values.push_back(number<T>(node[i], fmt::format("{}[{}]", path, i), rule));
    }
    out = std::move(values);
  }

  std::string source_;
  std::set<std::string> overridden_;
  std::vector<Frame> frames_;
};

// ---- writing ------------------------------------------------------------------------------------

class Writer {
 public:
  Writer() { out_ << YAML::BeginMap; }
  std::string str() {
    out_ << YAML::EndMap;
    return std::string(out_.c_str()) + "\n";
  }

  template <typename Body>
  void section(const char* key, Body body) {
    out_ << YAML::Key << key << YAML::Value << YAML::BeginMap;
    body();
    out_ << YAML::EndMap;
  }

  template <typename T>
  void field(const char* key, const T& value, const Rule& = Rule()) {
    out_ << YAML::Key << key << YAML::Value;
    write(value);
  }

 private:
  void write(bool v) { out_ << (v ? "true" : "false"); }
  void write(const std::string& v) { out_ << v; }
  void write(int64_t v) { out_ << v; }
  void write(uint64_t v) { out_ << v; }
  // Shortest text that reads back as the same double (0.1, not 0.10000000000000001).
  void write(double v) { out_ << fmt::format("{}", v); }
  void write(const std::vector<data::TransformSpec>& list) {
    out_ << YAML::BeginSeq;
    for (const auto& t : list) {
      out_ << YAML::Flow << YAML::BeginMap << YAML::Key << "type" << YAML::Value << t.type;
      if (t.type != "horizontal_flip") out_ << YAML::Key << "size" << YAML::Value << t.size;
      if (t.type == "random_resized_crop") {
        out_ << YAML::Key << "scale" << YAML::Value;
        write(t.scale);
        out_ << YAML::Key << "ratio" << YAML::Value;
        write(t.ratio);
      }
      if (t.type == "random_crop") out_ << YAML::Key << "padding" << YAML::Value << t.padding;
      if (t.type == "horizontal_flip") {
        out_ << YAML::Key << "p" << YAML::Value;
        write(t.p);
      }
      out_ << YAML::EndMap;
    }
    out_ << YAML::EndSeq;
  }
  template <typename T>
  void write(const std::vector<T>& v) {
    out_ << YAML::Flow << YAML::BeginSeq;
    for (const auto& x : v) write(x);
    out_ << YAML::EndSeq;
  }

  YAML::Emitter out_;
};

// ---- cross-field checks -------------------------------------------------------------------------

void check_consistency(const Config& c, const std::string& source) {
  auto fail = [&](const std::string& msg) { throw Error(fmt::format("{}: {}", source, msg)); };
  if (c.data.mean.size() != c.data.std.size()) {
    fail(fmt::format("data.mean has {} value(s) but data.std has {}; give one of each per channel",
                     c.data.mean.size(), c.data.std.size()));
  }
  if (c.data.shard_rank >= c.data.shard_count) {
    fail(fmt::format("data.shard_rank ({}) must be below data.shard_count ({})", c.data.shard_rank,
                     c.data.shard_count));
  }
  if (c.data.synthetic.channels != 1 && c.data.synthetic.channels != 3) {
    fail(fmt::format("data.synthetic.channels must be 1 or 3, got {}", c.data.synthetic.channels));
  }
  if (c.model.blocks.size() != c.model.widths.size()) {
    fail(fmt::format("model.blocks has {} entries but model.widths has {}; give one block count per "
                     "stage",
                     c.model.blocks.size(), c.model.widths.size()));
  }
  if (c.optimizer.type == "sgd" && c.optimizer.nesterov && c.optimizer.momentum == 0) {
    fail("optimizer.nesterov needs optimizer.momentum > 0; set a momentum or nesterov: false");
  }
  if (c.train.effective_batch_size > 0) {
    const int64_t per_step = c.data.batch_size * c.data.shard_count;
    if (c.train.effective_batch_size % per_step != 0) {
      fail(fmt::format("train.effective_batch_size ({}) must be a multiple of data.batch_size x "
                       "data.shard_count ({} x {} = {}); use {} or {}",
                       c.train.effective_batch_size, c.data.batch_size, c.data.shard_count, per_step,
                       std::max(per_step, c.train.effective_batch_size / per_step * per_step),
                       (c.train.effective_batch_size / per_step + 1) * per_step));
    }
    const int64_t derived = c.train.effective_batch_size / per_step;
    if (c.train.accumulate_steps != 1 && c.train.accumulate_steps != derived) {
      fail(fmt::format("train.accumulate_steps ({}) disagrees with train.effective_batch_size ({} = {} "
                       "accumulated batches of {}); set only one of them",
                       c.train.accumulate_steps, c.train.effective_batch_size, derived, per_step));
    }
  }
  if (c.schedule.warmup_epochs >= static_cast<double>(c.train.epochs)) {
    fail(fmt::format("schedule.warmup_epochs ({}) must be shorter than train.epochs ({})",
                     c.schedule.warmup_epochs, c.train.epochs));
  }
  const auto& milestones = c.schedule.milestones;
  if (c.schedule.type == "step") {
    if (milestones.empty()) {
      fail("schedule.milestones must list at least one epoch for schedule.type: step, e.g. "
           "milestones: [30, 60, 80]");
    }
    for (size_t i = 0; i < milestones.size(); ++i) {
      if (i > 0 && milestones[i] <= milestones[i - 1]) {
        fail(fmt::format("schedule.milestones must increase: {} after {} at [{}]", milestones[i],
                         milestones[i - 1], i));
      }
      if (milestones[i] >= c.train.epochs || static_cast<double>(milestones[i]) < c.schedule.warmup_epochs) {
        fail(fmt::format("schedule.milestones[{}] ({}) must be within the run: at least "
                         "schedule.warmup_epochs ({}) and below train.epochs ({})",
                         i, milestones[i], c.schedule.warmup_epochs, c.train.epochs));
      }
    }
  } else if (!milestones.empty()) {
    fail(fmt::format("schedule.milestones is used by schedule.type: step only, not {}; remove it",
                     c.schedule.type));
  }
  if (schedule_registry().get(c.schedule.type).own_warmup && c.schedule.warmup_epochs > 0) {
    fail(fmt::format("schedule.type: {} warms up by itself{}; set schedule.warmup_epochs: 0",
                     c.schedule.type, c.schedule.type == "one_cycle" ? " (schedule.pct_start)" : ""));
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

// Applies "a.b=c" overrides onto the YAML tree; returns the overridden key paths.
std::set<std::string> apply_overrides(YAML::Node& root, const std::vector<std::string>& overrides) {
  std::set<std::string> paths;
  for (const auto& text : overrides) {
    const auto eq = text.find('=');
    if (eq == std::string::npos || eq == 0) {
      throw Error(fmt::format("--set {}: expected key.path=value, e.g. --set optimizer.lr=0.05", text));
    }
    const std::string path = text.substr(0, eq);
    const std::string value = text.substr(eq + 1);
    std::vector<std::string> parts;
    std::stringstream ss(path);
    for (std::string part; std::getline(ss, part, '.');) {
      if (part.empty()) throw Error(fmt::format("--set {}: empty key in path '{}'", text, path));
      parts.push_back(part);
    }
    if (parts.size() < 2) {
      throw Error(fmt::format("--set {}: expected section.key=value (e.g. train.epochs=3)", text));
    }
    YAML::Node parsed;
    try {
      parsed = YAML::Load(value);
    } catch (const YAML::Exception& e) {
      throw Error(fmt::format("--set {}: the value is not valid YAML ({})", text, e.msg));
    }
    if (!root.IsDefined() || root.IsNull()) root = YAML::Node(YAML::NodeType::Map);
    if (!root.IsMap()) throw Error(fmt::format("--set {}: the config is not a mapping", text));
    // Walk (and make) the sections down to the key's parent.
    // (yaml-cpp's Node::operator= writes through to the node referred to; reset() rebinds.)
    YAML::Node node = root;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      if (!node[parts[i]].IsDefined() || node[parts[i]].IsNull()) {
        node[parts[i]] = YAML::Node(YAML::NodeType::Map);
      }
      YAML::Node child = node[parts[i]];
      if (!child.IsMap()) {
        throw Error(fmt::format("--set {}: '{}' is not a section of keys", text, parts[i]));
      }
      node.reset(child);
    }
    node[parts.back()] = parsed;
    paths.insert(path);
  }
  return paths;
}

}  // namespace

int64_t accumulate_steps_of(const Config& c) {
  if (c.train.effective_batch_size > 0) {
    return std::max<int64_t>(1, c.train.effective_batch_size / (c.data.batch_size * c.data.shard_count));
  }
  return c.train.accumulate_steps;
}

bool is_epoch_metric(const std::string& name) {
  const auto& names = epoch_metrics();
  return std::find(names.begin(), names.end(), name) != names.end();
}

bool higher_is_better(const std::string& metric) {
  STOKER_CHECK(is_epoch_metric(metric), "'{}' is not an epoch metric; known: {}", metric,
               fmt::join(epoch_metrics(), ", "));
  return metric.find("_loss") == std::string::npos;
}

Config parse_config(const std::string& yaml_text, const std::string& source,
                    const std::vector<std::string>& overrides) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::ParserException& e) {
    throw Error(fmt::format("{}: invalid YAML at line {}, column {}: {}", source, e.mark.line + 1,
                            e.mark.column + 1, e.msg));
  }
  const auto overridden = apply_overrides(root, overrides);
  Config config;
  Reader reader(root, source, overridden);
  visit_config(config, reader);
  reader.check_top_level();
  check_consistency(config, source);
  return config;
}

Config load_config(const std::filesystem::path& path, const std::vector<std::string>& overrides) {
  std::ifstream in(path);
  if (!in) {
    throw Error(fmt::format("{}: cannot read the config file ({}); check the path given to --config",
                            path.string(),
                            std::filesystem::exists(path) ? "permission denied" : "no such file"));
  }
  std::stringstream text;
  text << in.rdbuf();
  return parse_config(text.str(), path.string(), overrides);
}

std::string config_to_yaml(const Config& config) {
  Writer writer;
  visit_config(config, writer);
  return writer.str();
}

}  // namespace stoker
