#include "recipe/config.h"

#include <gtest/gtest.h>

#include <torch/torch.h>

#include "common/error.h"
#include "data/mixup.h"
#include "data/random_erasing.h"
#include "data/transform_options.h"
#include "models/compact_resnet.h"
#include "optim/schedule.h"
#include "test_util.h"
#include "trainer/losses.h"

namespace stoker {
namespace {

std::string error_of(const std::string& yaml, const std::vector<std::string>& sets = {}) {
  try {
    parse_config(yaml, "recipe.yaml", sets);
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "accepted:\n" << yaml;
  return "";
}

TEST(Config, EmptyTextGivesTheDefaults) {
  const Config c = parse_config("", "empty.yaml");
  EXPECT_EQ(c.optimizer.lr, OptimizerOptions().lr);
  EXPECT_EQ(c.data.root, "/usr/share/datasets/fashion-mnist");
}

TEST(Config, ReadsEveryKindOfValue) {
  const Config c = parse_config(R"(
run: {name: exp-1, seed: 9, device: cuda:1, threads: 3}
data: {type: synthetic, batch_size: 64, shuffle: no, workers: 3, mean: [0.1, 0.2, 0.3], std: [1, 2, 3], synthetic: {height: 8, cpu_cost_us: 50}}
model: {widths: [8, 16], blocks: [2, 1], dropout: 0.25}
optimizer: {type: adamw, lr: 3e-4, betas: [0.8, 0.95]}
schedule: {type: constant}
train: {epochs: 4, channels_last: true}
)", "r.yaml");
  EXPECT_EQ(c.run.name, "exp-1");
  EXPECT_EQ(c.run.seed, 9u);
  EXPECT_EQ(c.run.device, "cuda:1");
  EXPECT_EQ(c.data.batch_size, 64);
  EXPECT_FALSE(c.data.shuffle);
  EXPECT_EQ(c.data.workers, 3);
  const auto& synthetic = c.data.dataset.as<data::SyntheticOptions>();
  EXPECT_EQ(synthetic.height, 8);
  EXPECT_EQ(synthetic.cpu_cost_us, 50);
  EXPECT_EQ(synthetic.width, data::SyntheticOptions().width);
  EXPECT_EQ(c.data.std, (std::vector<double>{1, 2, 3}));
  EXPECT_EQ(c.model.as<models::CompactResNetOptions>().blocks, (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(c.optimizer.algorithm.type(), "adamw");
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 3e-4);
  EXPECT_EQ(c.optimizer.algorithm.as<AdamWKeys>().betas, (std::vector<double>{0.8, 0.95}));
  EXPECT_EQ(c.train.epochs, 4);
}

TEST(Config, WrongTypeNamesKeyLineAndValue) {
  EXPECT_EQ(error_of("run:\n  name: x\noptimizer:\n  lr: fast\n"),
            "recipe.yaml: optimizer.lr at line 4: expected a positive number, got \"fast\"");
  EXPECT_EQ(error_of("train:\n  epochs: 2.5\n"),
            "recipe.yaml: train.epochs at line 2: expected an integer >= 1, got \"2.5\"");
  EXPECT_EQ(error_of("data:\n  shuffle: maybe\n"),
            "recipe.yaml: data.shuffle at line 2: expected true or false, got \"maybe\"");
  EXPECT_EQ(error_of("data:\n  mean: 0.5\n"),
            "recipe.yaml: data.mean at line 2: expected a list of at least 1 value(s), each a number, "
            "got \"0.5\"");
  EXPECT_EQ(error_of("optimizer: 3\n"),
            "recipe.yaml: optimizer at line 1: expected a mapping of keys, got \"3\"");
}

TEST(Config, OutOfRangeValuesAreRejected) {
  EXPECT_EQ(error_of("optimizer:\n  lr: -0.1\n"),
            "recipe.yaml: optimizer.lr at line 2: expected a positive number, got \"-0.1\"");
  EXPECT_EQ(error_of("data:\n  batch_size: 0\n"),
            "recipe.yaml: data.batch_size at line 2: expected an integer >= 1, got \"0\"");
  EXPECT_EQ(error_of("model:\n  dropout: 1\n"),
            "recipe.yaml: model.dropout at line 2: expected a number in [0, 1), got \"1\"");
  EXPECT_EQ(error_of("run:\n  seed: -4\n"),
            "recipe.yaml: run.seed at line 2: expected an integer >= 0, got \"-4\"");
  EXPECT_EQ(error_of("data:\n  std: [0.3, 0]\n"),
            "recipe.yaml: data.std[1] at line 2: expected a positive number, got \"0\"");
  EXPECT_EQ(error_of("optimizer:\n  type: adamw\n  betas: [0.9]\n"),
            "recipe.yaml: optimizer.betas at line 3: expected a list of 2 values, each a number in "
            "[0, 1), got 1 value(s)");
  EXPECT_EQ(error_of("optimizer:\n  lr: .nan\n"),
            "recipe.yaml: optimizer.lr at line 2: expected a positive number, got \".nan\"");
}

TEST(Config, ContinuousAutotuneThresholdsAreKeysAndChecked) {
  const Config c = parse_config(
      "data:\n  autotune: continuous\n  autotune_continuous: {starved_wait: 0.2, fed_wait: 0.08, windows: 2, "
      "cooldown: 4, max_workers: 6}\n",
      "r.yaml");
  EXPECT_DOUBLE_EQ(c.data.autotune_continuous.starved_wait, 0.2);
  EXPECT_DOUBLE_EQ(c.data.autotune_continuous.fed_wait, 0.08);
  EXPECT_DOUBLE_EQ(c.data.autotune_continuous.starved_gpu_idle, 0.10);  // not given: the default
  EXPECT_EQ(c.data.autotune_continuous.windows, 2);
  EXPECT_EQ(c.data.autotune_continuous.cooldown, 4);
  EXPECT_EQ(c.data.autotune_continuous.max_workers, 6);
  EXPECT_CONTAINS(error_of("data:\n  autotune_continuous: {starved_wait: 0.05, fed_wait: 0.2}\n"),
                  "data.autotune_continuous.fed_wait (0.2) must not be above starved_wait (0.05)");
  EXPECT_EQ(error_of("data:\n  autotune_continuous:\n    windows: 0\n"),
            "recipe.yaml: data.autotune_continuous.windows at line 3: expected an integer >= 1, got \"0\"");
}

TEST(Config, ChoicesAreListed) {
  EXPECT_EQ(error_of("optimizer:\n  type: adam\n"),
            "recipe.yaml: optimizer.type at line 2: unknown optimizer type \"adam\"; did you mean adamw? (known: "
            "adamw, lamb, sgd)");
  EXPECT_EQ(error_of("run:\n  device: gpu\n"),
            "recipe.yaml: run.device at line 2: expected auto, cpu, cuda or cuda:N, got \"gpu\"");
  const std::string msg = error_of("model:\n  type: resnet9000\n");
  EXPECT_NE(msg.find("model.type at line 2: expected a registered model type ("), std::string::npos)
      << msg;
  EXPECT_NE(msg.find("compact_resnet"), std::string::npos) << msg;
  EXPECT_NE(msg.find("got \"resnet9000\""), std::string::npos) << msg;
}

// Found by fuzz_config (fuzz/regressions/config/): a mapping used as a key, inside a flow mapping,
// escaped parse_config as yaml-cpp's "bad conversion" without the file's name.
TEST(Config, AKeyThatIsNotANameIsAClearError) {
  EXPECT_EQ(error_of("data:\n  type: synthetic\n  synthetic: {height: 8, {metric: test_loss, patience: 1}}\n"),
            "recipe.yaml: data.synthetic at line 3: a key must be a name, but this key is a mapping; "
            "write `name: value`");
  EXPECT_EQ(error_of("[run]: 1\n"),
            "recipe.yaml: (top level) at line 1: a key must be a name, but this key is a list; write "
            "`name: value`");
  const std::string fuzzed = testing::read_bytes(std::filesystem::path(STOKER_SOURCE_DIR) /
                                                 "fuzz/regressions/config/crash-mapping-as-key");
  EXPECT_NE(error_of(fuzzed).find("a key must be a name"), std::string::npos);
}

TEST(Config, UnknownKeysAndSectionsAreRejected) {
  EXPECT_EQ(error_of("optimizer:\n  lr: 0.1\n  momentun: 0.9\n"),
            "recipe.yaml: optimizer.momentun at line 3: optimizer type 'sgd' has no key 'momentun'; did you "
            "mean momentum?");
  // Keys of another optimizer type are not silently ignored.
  EXPECT_EQ(error_of("optimizer:\n  type: sgd\n  betas: [0.9, 0.99]\n"),
            "recipe.yaml: optimizer.betas at line 3: optimizer type 'sgd' has no key 'betas'; it takes: "
            "decay_norm_and_bias, head_lr_scale, implementation, layer_decay, lr, lr_reference_batch, momentum, "
            "nesterov, type, weight_decay");
  EXPECT_EQ(error_of("trainer:\n  epochs: 3\n"),
            "recipe.yaml: trainer at line 1: unknown section 'trainer'; did you mean train?");
  const std::string msg = error_of("optimiser:\n  lr: 0.1\nexperiment: {}\n");
  EXPECT_NE(msg.find("recipe.yaml: optimiser at line 1: unknown section 'optimiser'; did you mean optimizer?"),
            std::string::npos) << msg;
  EXPECT_NE(error_of("experiment: {}\n").find("recipe.yaml: experiment at line 1: unknown section 'experiment'; "
                                               "known sections: checkpoint, data, distributed, logging, loss, model, "
                                               "optimizer, run, schedule, train"),
            std::string::npos);
}

// A misspelt key names the closest known one (within an edit or two, or a key it starts), in the file
// and on the command line alike; with nothing close, the keys of the section are listed.
TEST(Config, AnUnknownKeySuggestsTheClosestKnownOne) {
  EXPECT_EQ(error_of("", {"train.epoch=3"}), "--set train.epoch: unknown key; did you mean epochs?");
  EXPECT_EQ(error_of("train:\n  epochs: 3\n  lable_smoothing: 0.1\n"),
            "recipe.yaml: train.lable_smoothing at line 3: unknown key; did you mean label_smoothing?");
  EXPECT_EQ(error_of("schedule:\n  warmup: 1\n"),
            "recipe.yaml: schedule.warmup at line 2: schedule type 'cosine' has no key 'warmup'; did you mean "
            "warmup_epochs?");
  EXPECT_EQ(error_of("", {"optimizer.Momentum=0.5"}),
            "--set optimizer.Momentum: optimizer type 'sgd' has no key 'Momentum'; did you mean momentum?");
  EXPECT_EQ(error_of("", {"data.synthetic.hieght=8", "data.type=synthetic"}),
            "--set data.synthetic.hieght: unknown key; did you mean height?");
  // Nothing close: the known keys.
  EXPECT_EQ(error_of("checkpoint: {keep: 3}\n"),
            "recipe.yaml: checkpoint.keep at line 1: unknown key 'keep' in section 'checkpoint'; known keys: "
            "best_metric, every_steps, save_best, save_last");
}

TEST(Config, TransformListsAreReadAndChecked) {
  const Config c = parse_config(R"(
data:
  train_transforms:
    - {type: random_resized_crop, size: 224, scale: [0.35, 1]}
    - {type: horizontal_flip, p: 0.25}
  eval_transforms:
    - {type: resize, size: 256}
    - {type: center_crop, size: 224}
)", "r.yaml");
  ASSERT_EQ(c.data.train_transforms.size(), 2u);
  EXPECT_EQ(c.data.train_transforms[0].type(), "random_resized_crop");
  const auto& crop = c.data.train_transforms[0].as<data::RandomResizedCropOptions>();
  EXPECT_EQ(crop.size, 224);
  EXPECT_EQ(crop.scale, (std::vector<double>{0.35, 1}));
  EXPECT_EQ(crop.ratio, (std::vector<double>{3.0 / 4.0, 4.0 / 3.0}));
  EXPECT_DOUBLE_EQ(c.data.train_transforms[1].as<data::HorizontalFlipOptions>().p, 0.25);
  EXPECT_EQ(c.data.eval_transforms[1].type(), "center_crop");
  EXPECT_EQ(config_to_yaml(parse_config(config_to_yaml(c), "again.yaml")), config_to_yaml(c));

  EXPECT_EQ(error_of("data:\n  train_transforms:\n    - {type: rotate, degrees: 5}\n"),
            "recipe.yaml: data.train_transforms[0].type at line 3: expected a registered transform type "
            "(center_crop, horizontal_flip, rand_augment, random_crop, random_resized_crop, resize, "
            "trivial_augment_wide), got \"rotate\"");
  EXPECT_EQ(error_of("data:\n  train_transforms:\n    - {type: center_crop, padding: 2, size: 8}\n"),
            "recipe.yaml: data.train_transforms[0].padding at line 3: transform type 'center_crop' "
            "has no key 'padding'; it takes: size, type");
  EXPECT_EQ(error_of("data:\n  eval_transforms:\n    - {type: resize}\n"),
            "recipe.yaml: data.eval_transforms[0] at line 3: resize needs a 'size' (pixels)");
  EXPECT_EQ(error_of("data:\n  train_transforms: horizontal_flip\n"),
            "recipe.yaml: data.train_transforms at line 2: expected a list of transforms, e.g. "
            "[{type: center_crop}], got \"horizontal_flip\"");
  EXPECT_EQ(error_of("data:\n  type: synthetic\n  synthetic: {channels: 2}\n"),
            "recipe.yaml: data.synthetic at line 3: channels must be 1 or 3, got 2");
  EXPECT_EQ(error_of("data:\n  synthetic: {channels: 3}\n"),
            "recipe.yaml: data.synthetic at line 2: this section holds the keys of data.type: synthetic, "
            "but data.type is idx; remove it or change data.type");
  EXPECT_EQ(error_of("data:\n  type: synthetic\n  synthetic: {depth: 2}\n"),
            "recipe.yaml: data.synthetic.depth at line 3: unknown key 'depth' in section "
            "'data.synthetic'; known keys: channels, cpu_cost_us, height, slow_from_epoch, slow_read_us, "
            "test_samples, train_samples, width");
  EXPECT_EQ(parse_config("", "r.yaml", {"data.type=synthetic", "data.synthetic.cpu_cost_us=250"})
                .data.dataset.as<data::SyntheticOptions>()
                .cpu_cost_us,
            250);
}

TEST(Config, EachRegisteredTypeHasItsOwnKeys) {
  // A key the chosen model type does not have is an error listing the keys it has.
  EXPECT_EQ(error_of("model: {type: resnet50, widths: [8]}\n"),
            "recipe.yaml: model.widths at line 1: model type 'resnet50' has no key 'widths'; it takes: "
            "activation_checkpointing, drop_path_rate, freeze, freeze_until_epoch, pretrained, pretrained_rename, "
            "pretrained_skip, type");
  EXPECT_EQ(error_of("model:\n  type: compact_resnet\n  depth: 3\n"),
            "recipe.yaml: model.depth at line 3: model type 'compact_resnet' has no key 'depth'; it takes: "
            "activation_checkpointing, blocks, drop_path_rate, dropout, freeze, freeze_until_epoch, pretrained, "
            "pretrained_rename, pretrained_skip, type, widths");
  // The resolved config holds the chosen type's keys only, and reads back the same.
  const Config c = parse_config("model: {type: resnet18}\n", "r.yaml");
  const std::string yaml = config_to_yaml(c);
  EXPECT_NE(yaml.find("model:\n  type: resnet18\n  drop_path_rate: 0\n  pretrained: "), std::string::npos) << yaml;
  EXPECT_EQ(yaml.find("widths"), std::string::npos) << yaml;
  EXPECT_EQ(config_to_yaml(parse_config(yaml, "again.yaml")), yaml);
  // An application's model type gets its keys the same way.
  struct WideOptions : TypeOptionsOf<WideOptions> {
    int64_t width = 4;
    void visit(OptionsVisitor& v) override { v.field("width", width, rules::at_least(2)); }
  };
  if (!models::model_registry().contains("config_test_wide")) {
    models::model_registry().add("config_test_wide", {options_of<WideOptions>(), nullptr});
  }
  EXPECT_EQ(parse_config("model: {type: config_test_wide, width: 9}\n", "r.yaml").model.as<WideOptions>().width, 9);
  EXPECT_EQ(error_of("model: {type: config_test_wide, width: 1}\n"),
            "recipe.yaml: model.width at line 1: expected an integer >= 2, got \"1\"");
}

std::vector<std::string> sink_types(const Config& c) {
  std::vector<std::string> out;
  for (const TypedOptions& s : c.logging.sinks) out.push_back(s.type());
  return out;
}
using Types = std::vector<std::string>;

TEST(Config, LoggingSectionAndIdxClassNames) {
  const Config defaults = parse_config("", "r.yaml");
  EXPECT_EQ(sink_types(defaults), (Types{"metrics_file", "console", "tensorboard"}));
  EXPECT_TRUE(defaults.logging.telemetry);
  EXPECT_TRUE(defaults.logging.flops);
  EXPECT_EQ(defaults.logging.telemetry_interval_s, 1.0);
  const Config c = parse_config("logging: {sinks: [{type: metrics_file}, {type: console}], telemetry_interval_s: 0.5}\n"
                                "data: {idx: {class_names: fashion_mnist}}\n", "r.yaml");
  EXPECT_EQ(sink_types(c), (Types{"metrics_file", "console"}));
  EXPECT_EQ(sink_types(parse_config(config_to_yaml(c), "again.yaml")), (Types{"metrics_file", "console"}));
  EXPECT_EQ(c.logging.telemetry_interval_s, 0.5);
  EXPECT_EQ(c.data.dataset.as<data::IdxOptions>().class_names, "fashion_mnist");
  EXPECT_NE(config_to_yaml(c).find("logging:"), std::string::npos);
  EXPECT_EQ(error_of("logging:\n  telemetry_interval_s: 0\n"),
            "recipe.yaml: logging.telemetry_interval_s at line 2: expected a positive number, got \"0\"");
  EXPECT_NE(error_of("data:\n  idx: {class_names: digits}\n").find("data.idx.class_names at line 2"),
            std::string::npos);
  EXPECT_CONTAINS(error_of("logging:\n  sinks: [{type: wandb}]\n"),
                  "logging.sinks[0].type at line 2: expected a registered metrics sink type (console, metrics_file, "
                  "mlflow, tensorboard)");
  EXPECT_CONTAINS(error_of("logging:\n  sinks: [{type: tensorboard, dir: /tmp/tb}]\n"),
                  "dir (/tmp/tb) must be a folder inside the run directory");
}

TEST(Config, MlflowSinkKeys) {
  const Config c = parse_config("logging:\n  sinks:\n    - {type: metrics_file}\n    - {type: mlflow, tracking_uri: "
                                "'http://127.0.0.1:5000', experiment: mnist, run_name: first}\n",
                                "r.yaml");
  ASSERT_EQ(sink_types(c), (Types{"metrics_file", "mlflow"}));
  EXPECT_EQ(c.logging.sinks[1].as<MlflowSinkOptions>().tracking_uri, "http://127.0.0.1:5000");
  EXPECT_EQ(c.logging.sinks[1].as<MlflowSinkOptions>().experiment, "mnist");
  const Config again = parse_config(config_to_yaml(c), "saved.yaml");  // written and read back
  EXPECT_EQ(again.logging.sinks[1].as<MlflowSinkOptions>().run_name, "first");
  EXPECT_EQ(error_of("logging:\n  sinks:\n    - type: mlflow\n      tracking_uri: localhost:5000\n"),
            "recipe.yaml: logging.sinks[0].tracking_uri at line 4: expected the http:// or https:// address of an "
            "MLflow tracking server (e.g. http://127.0.0.1:5000), got \"localhost:5000\"");
  EXPECT_CONTAINS(error_of("logging:\n  sinks: [{type: mlflow}]\n"), "mlflow needs a tracking_uri");
  EXPECT_CONTAINS(error_of("logging:\n  sinks: [{type: mlflow, uri: 'http://x'}]\n"), "logging.sinks[0].uri");
}

// logging.tensorboard and logging.mlflow, as the saved configs of earlier runs hold them, read as the
// sinks they meant, said in one note; beside logging.sinks they are an error naming both.
TEST(Config, OldLoggingKeysReadAsSinks) {
  std::vector<std::string> notes;
  const Config old = parse_config("logging:\n  tensorboard: true\n  mlflow: {tracking_uri: 'http://127.0.0.1:5000', "
                                  "experiment: mnist, run_name: ''}\n",
                                  "saved.yaml", {}, &notes);
  EXPECT_EQ(sink_types(old), (Types{"metrics_file", "console", "tensorboard", "mlflow"}));
  EXPECT_EQ(old.logging.sinks[3].as<MlflowSinkOptions>().experiment, "mnist");
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_EQ(notes[0], "saved.yaml: logging.tensorboard / logging.mlflow (keys of earlier recipes) read as "
                      "logging.sinks: [metrics_file, console, tensorboard, mlflow]; write that list instead");
  notes.clear();
  const Config off = parse_config("logging: {tensorboard: false, mlflow: {tracking_uri: '', experiment: ''}}\n",
                                  "saved.yaml", {}, &notes);
  EXPECT_EQ(sink_types(off), (Types{"metrics_file", "console"}));
  // --set of an old key works on a recipe that does not list its sinks.
  EXPECT_EQ(sink_types(parse_config("", "r.yaml", {"logging.tensorboard=false"}, &notes)),
            (Types{"metrics_file", "console"}));
  EXPECT_CONTAINS(error_of("logging:\n  mlflow:\n    tracking_uri: localhost:5000\n"), "tracking_uri at line 3");
  EXPECT_CONTAINS(error_of("logging:\n  tensorboard: false\n  sinks: [{type: console}]\n"),
                  "logging.tensorboard / logging.mlflow and logging.sinks are both given");
}

// data.random_erasing and data.mixup read as data.batch_ops, in that order; an operation their keys
// turn off is left out.
TEST(Config, OldBatchOperationKeysReadAsBatchOps) {
  std::vector<std::string> notes;
  const Config c = parse_config("data:\n  mixup: {mixup_alpha: 0.2, cutmix_alpha: 1.0}\n  random_erasing: "
                                "{probability: 0.25, mode: pixel}\n",
                                "old.yaml", {}, &notes);
  ASSERT_EQ(c.data.batch_ops.size(), 2u);
  EXPECT_EQ(c.data.batch_ops[0].type(), "random_erasing");
  EXPECT_EQ(c.data.batch_ops[0].as<data::RandomErasingSettings>().mode, "pixel");
  EXPECT_EQ(c.data.batch_ops[1].as<data::MixupSettings>().cutmix_alpha, 1.0);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_CONTAINS(notes[0], "read as data.batch_ops: [random_erasing, mixup]");
  const Config off = parse_config("data:\n  mixup: {mixup_alpha: 0, cutmix_alpha: 0, cutmix_minmax: []}\n"
                                  "  random_erasing: {probability: 0, mode: const}\n",
                                  "old.yaml", {}, &notes);
  EXPECT_TRUE(off.data.batch_ops.empty());
  EXPECT_CONTAINS(error_of("data:\n  mixup: {mixup_alpha: 0.2}\n  batch_ops: []\n"), "are both given");
  EXPECT_CONTAINS(error_of("data:\n  mixup: {mixup_alpha: 0.2, mode: row}\n"), "mode");
}

TEST(Config, LossSectionPicksTheTypeAndItsKeys) {
  const Config plain = parse_config("", "r.yaml");
  EXPECT_EQ(plain.loss.type(), "cross_entropy");
  const Config c = parse_config("loss: {type: bce, target_threshold: 0.2}\ntrain: {label_smoothing: 0.1}\n", "r.yaml");
  EXPECT_EQ(c.loss.type(), "bce");
  EXPECT_DOUBLE_EQ(c.loss.as<BceKeys>().target_threshold, 0.2);
  const LossFunction loss = make_loss(c.loss, c.train.label_smoothing);
  const torch::Tensor logits = torch::tensor({{1.0f, -0.5f, 0.25f}, {0.0f, 2.0f, -1.0f}});
  const torch::Tensor labels = torch::tensor({2, 1}, torch::kLong);
  EXPECT_NEAR(loss(logits, labels).item<double>(), bce_loss(logits, labels, 0.1, 0.2).item<double>(), 1e-7);
  EXPECT_EQ(parse_config(config_to_yaml(c), "again.yaml").loss.type(), "bce");
  EXPECT_THROW(parse_config("loss: {type: cross_entropy, target_threshold: 0.2}\n", "r.yaml"), Error);
  EXPECT_THROW(parse_config("loss: {type: bce, target_threshold: 1.5}\n", "r.yaml"), Error);
  EXPECT_THROW(parse_config("loss: {type: focal}\n", "r.yaml"), Error);
}

TEST(Config, InvalidYamlNamesLineAndColumn) {
  const std::string msg = error_of("run:\n  name: [unclosed\n");
  EXPECT_NE(msg.find("recipe.yaml: invalid YAML at line"), std::string::npos) << msg;
}

TEST(Config, CrossFieldChecks) {
  EXPECT_EQ(error_of("data:\n  mean: [0.1, 0.2]\n  std: [0.3]\n"),
            "recipe.yaml: data.mean has 2 value(s) but data.std has 1; give one of each per channel");
  EXPECT_EQ(error_of("model:\n  widths: [8, 16]\n  blocks: [1]\n"),
            "recipe.yaml: model at line 2: blocks has 1 entries but widths has 2; give one block count "
            "per stage");
  EXPECT_EQ(error_of("schedule:\n  warmup_epochs: 3\ntrain:\n  epochs: 3\n"),
            "recipe.yaml: schedule.warmup_epochs (3) must be shorter than train.epochs (3)");
  EXPECT_EQ(error_of("optimizer:\n  momentum: 0\n  nesterov: true\n"),
            "recipe.yaml: optimizer at line 2: nesterov needs momentum > 0; set a momentum or "
            "nesterov: false");
}

TEST(Config, SchedulesEmaAndEarlyStopping) {
  const Config c = parse_config(R"(
optimizer: {lr: 0.1, lr_reference_batch: 256}
schedule: {type: step, warmup_epochs: 1, milestones: [3, 6, 8], gamma: 0.2}
train:
  epochs: 10
  ema_decay: 0.9998
  ema_warmup: true
  early_stopping: {metric: ema_test_loss, patience: 4, min_delta: 0.001}
checkpoint: {best_metric: test_top5}
)", "r.yaml");
  EXPECT_EQ(c.optimizer.lr_reference_batch, 256);
  EXPECT_EQ(c.schedule.curve.type(), "step");
  EXPECT_EQ(c.schedule.curve.as<StepKeys>().milestones, (std::vector<int64_t>{3, 6, 8}));
  EXPECT_DOUBLE_EQ(c.schedule.curve.as<StepKeys>().gamma, 0.2);
  EXPECT_DOUBLE_EQ(c.train.ema_decay, 0.9998);
  EXPECT_TRUE(c.train.ema_warmup);
  EXPECT_EQ(c.train.early_stopping.metric, "ema_test_loss");
  EXPECT_EQ(c.train.early_stopping.patience, 4);
  EXPECT_DOUBLE_EQ(c.train.early_stopping.min_delta, 0.001);
  EXPECT_EQ(c.checkpoint.best_metric, "test_top5");
  EXPECT_EQ(config_to_yaml(parse_config(config_to_yaml(c), "again.yaml")), config_to_yaml(c));
  const Config one_cycle = parse_config(
      "schedule: {type: one_cycle, pct_start: 0.25, div_factor: 10, final_div_factor: 100}\n", "r.yaml");
  EXPECT_DOUBLE_EQ(one_cycle.schedule.curve.as<OneCycleKeys>().pct_start, 0.25);
  EXPECT_DOUBLE_EQ(one_cycle.schedule.curve.as<OneCycleKeys>().final_div_factor, 100);
  // The resolved config holds one_cycle's keys, not the other types'.
  EXPECT_TRUE(config_to_yaml(one_cycle).find("milestones") == std::string::npos) << config_to_yaml(one_cycle);

  EXPECT_EQ(error_of("schedule: {type: step}\n"),
            "recipe.yaml: schedule at line 1: milestones must list at least one epoch, e.g. milestones: "
            "[30, 60, 80]");
  EXPECT_EQ(error_of("schedule: {type: step, milestones: [3, 3]}\n"),
            "recipe.yaml: schedule at line 1: milestones must increase: 3 after 3 at [1]");
  EXPECT_EQ(error_of("schedule: {type: step, milestones: [4, 12]}\ntrain: {epochs: 12}\n"),
            "recipe.yaml: schedule.milestones[1] (12) must be within the run: at least "
            "schedule.warmup_epochs (0) and below train.epochs (12)");
  EXPECT_EQ(error_of("schedule: {type: step, warmup_epochs: 2, milestones: [1, 5]}\n"),
            "recipe.yaml: schedule.milestones[0] (1) must be within the run: at least "
            "schedule.warmup_epochs (2) and below train.epochs (10)");
  EXPECT_EQ(error_of("schedule: {milestones: [2]}\n"),
            "recipe.yaml: schedule.milestones at line 1: schedule type 'cosine' has no key 'milestones'; it "
            "takes: final_lr_ratio, type, warmup_epochs");
  EXPECT_EQ(error_of("schedule: {type: step, milestones: [0]}\n"),
            "recipe.yaml: schedule.milestones[0] at line 1: expected an integer >= 1, got \"0\"");
  EXPECT_EQ(error_of("schedule: {type: one_cycle, warmup_epochs: 1}\n"),
            "recipe.yaml: schedule.type: one_cycle warms up by itself (schedule.pct_start); set "
            "schedule.warmup_epochs: 0");
  EXPECT_EQ(error_of("schedule: {type: one_cycle, pct_start: 1}\n"),
            "recipe.yaml: schedule.pct_start at line 1: expected a number in (0, 1), got \"1\"");
  EXPECT_EQ(error_of("schedule: {type: linear}\n"),
            "recipe.yaml: schedule.type at line 1: expected a registered schedule type (constant, "
            "cosine, one_cycle, step), got \"linear\"");
  EXPECT_EQ(error_of("train: {ema_decay: 1}\n"),
            "recipe.yaml: train.ema_decay at line 1: expected a number in [0, 1), got \"1\"");
  EXPECT_EQ(error_of("checkpoint: {best_metric: ema_test_top1}\n"),
            "recipe.yaml: checkpoint.best_metric is ema_test_top1, but there is no EMA of the "
            "weights; set train.ema_decay (e.g. 0.9998) or pick a test_* metric");
  EXPECT_EQ(error_of("train:\n  early_stopping: {metric: train_loss}\n"),
            "recipe.yaml: train.early_stopping.metric at line 2: expected one of: test_top1, "
            "test_top5, test_loss, ema_test_top1, ema_test_top5, ema_test_loss, got \"train_loss\"");
  EXPECT_EQ(error_of("", {"train.early_stopping.patience=-1"}),
            "--set train.early_stopping.patience: expected an integer >= 0, got \"-1\"");
}

TEST(Config, SetOverridesAnyKeyAndIsChecked) {
  const Config c = parse_config("optimizer:\n  lr: 0.1\n", "r.yaml",
                                {"optimizer.lr=0.05", "train.epochs=3", "model.widths=[4, 8, 12]"});
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 0.05);
  EXPECT_EQ(c.train.epochs, 3);
  EXPECT_EQ(c.model.as<models::CompactResNetOptions>().widths, (std::vector<int64_t>{4, 8, 12}));
  EXPECT_EQ(error_of("", {"optimizer.lr=fast"}),
            "--set optimizer.lr: expected a positive number, got \"fast\"");
  EXPECT_NE(error_of("", {"optimizer.lrr=1"}).find("--set optimizer.lrr: optimizer type 'sgd' has no key 'lrr'"),
            std::string::npos);
  EXPECT_EQ(error_of("", {"epochs=3"}),
            "--set epochs=3: expected section.key=value (e.g. train.epochs=3), or a whole section as a mapping "
            "(e.g. --set 'optimizer={type: adamw, lr: 0.002}')");
  EXPECT_EQ(error_of("", {"train.epochs"}),
            "--set train.epochs: expected key.path=value, e.g. --set optimizer.lr=0.05");
}

TEST(Config, ResolvedYamlReadsBackTheSame) {
  Config c = parse_config("", "r.yaml", {"optimizer.lr=0.1", "data.mean=[0.286]", "run.seed=12345678901"});
  const std::string yaml = config_to_yaml(c);
  EXPECT_NE(yaml.find("lr: 0.1\n"), std::string::npos) << yaml;
  const Config back = parse_config(yaml, "resolved.yaml");
  EXPECT_EQ(config_to_yaml(back), yaml);
  EXPECT_EQ(back.run.seed, 12345678901u);
  EXPECT_EQ(back.data.mean, c.data.mean);
}

TEST(Config, MissingFileIsNamed) {
  try {
    load_config("/nonexistent/recipe.yaml");
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "/nonexistent/recipe.yaml: cannot read the config file (no such file); "
                           "check the path given to --config");
  }
}

TEST(Config, ShippedRecipesLoad) {
  int recipes = 0;
  for (const char* folder : {"/configs", "/bench"}) {
    for (const auto& entry : std::filesystem::directory_iterator(std::string(STOKER_SOURCE_DIR) + folder)) {
      if (entry.path().extension() != ".yaml") continue;
      EXPECT_NO_THROW(load_config(entry.path())) << entry.path();
      ++recipes;
    }
  }
  EXPECT_GE(recipes, 6);
}

// Every shipped recipe resolves as it did before logging.sinks and data.batch_ops: its resolved config
// as --print-config wrote it then (tests/golden/print_config/, with the old keys), read through their
// aliases, is the recipe's resolved config now, key for key.
TEST(Config, ShippedRecipesResolveAsBeforeTheTypedLists) {
  int recipes = 0;
  const std::filesystem::path golden = std::filesystem::path(STOKER_SOURCE_DIR) / "tests/golden/print_config";
  for (const auto& entry : std::filesystem::directory_iterator(std::string(STOKER_SOURCE_DIR) + "/configs")) {
    if (entry.path().extension() != ".yaml") continue;
    const std::filesystem::path before = golden / entry.path().filename();
    if (!std::filesystem::exists(before)) continue;  // a recipe added since: it had no "before"
    std::vector<std::string> notes;
    const Config then = load_config(before, {}, &notes);
    EXPECT_EQ(notes.size(), 2u) << before;  // the batch operations' keys and the logging keys, one note each
    EXPECT_EQ(config_to_yaml(then), config_to_yaml(load_config(entry.path()))) << entry.path();
    ++recipes;
  }
  EXPECT_GE(recipes, 8);
}

TEST(Schedule, LinearScalingWithTheGlobalBatch) {
  Config c;
  c.optimizer.lr = 0.1;
  c.data.batch_size = 256;
  c.data.shard_count = 2;
  EXPECT_EQ(batch_arithmetic(c).global_batch, 512);
  EXPECT_DOUBLE_EQ(batch_arithmetic(c).lr, 0.1);  // off
  c.optimizer.lr_reference_batch = 128;
  EXPECT_DOUBLE_EQ(batch_arithmetic(c).lr, 0.4);
  c.optimizer.lr_reference_batch = 1024;
  EXPECT_DOUBLE_EQ(batch_arithmetic(c).lr, 0.05);
  // Under a launcher the ranks replace data.shard_count; accumulation multiplies the global batch.
  c.data.shard_count = 1;
  c.train.effective_batch_size = 2048;
  const BatchArithmetic four = batch_arithmetic(c, 4);
  EXPECT_EQ(four.shards, 4);
  EXPECT_EQ(four.accumulate_steps, 2);
  EXPECT_EQ(four.global_batch, 2048);
  EXPECT_DOUBLE_EQ(four.lr, 0.2);
  c.train.effective_batch_size = 1000;
  EXPECT_CONTAINS(batch_arithmetic(c, 4).problem, "train.effective_batch_size (1000) must be a multiple of "
                                                  "data.batch_size x the ranks (256 x 4 = 1024); use 1024 or 1024");
}

// An application's own schedule type, registered by name, is what the config's schedule.type selects.
TEST(Config, ARegisteredScheduleIsSelectedByType) {
  if (!schedule_registry().contains("test_doubling")) {
    schedule_registry().add("test_doubling", {options_of<NoOptions>(), [](const TypeOptions&, double lr, int64_t step,
                                                                           const ScheduleSpan&) {
                              return lr * static_cast<double>(step + 1);
                            }});
  }
  EXPECT_EQ(parse_config("schedule: {type: test_doubling}\n", "r.yaml").schedule.curve.type(), "test_doubling");
}

}  // namespace
}  // namespace stoker
