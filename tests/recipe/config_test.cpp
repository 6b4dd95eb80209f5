#include "recipe/config.h"

#include <gtest/gtest.h>

#include "common/error.h"
#include "models/compact_resnet.h"
#include "optim/schedule.h"
#include "data/transform_options.h"
#include "test_util.h"

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
            "recipe.yaml: optimizer.type at line 2: expected a registered optimizer type (adamw, lamb, sgd), got "
            "\"adam\"");
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
            "decay_norm_and_bias, implementation, lr, lr_reference_batch, momentum, nesterov, type, "
            "weight_decay");
  EXPECT_EQ(error_of("trainer:\n  epochs: 3\n"),
            "recipe.yaml: trainer at line 1: unknown section 'trainer'; did you mean train?");
  const std::string msg = error_of("optimiser:\n  lr: 0.1\nexperiment: {}\n");
  EXPECT_NE(msg.find("recipe.yaml: optimiser at line 1: unknown section 'optimiser'; did you mean optimizer?"),
            std::string::npos) << msg;
  EXPECT_NE(error_of("experiment: {}\n").find("recipe.yaml: experiment at line 1: unknown section 'experiment'; "
                                               "known sections: checkpoint, data, logging, loss, model, optimizer, run, "
                                               "schedule, train"),
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
            "recipe.yaml: model.widths at line 1: model type 'resnet50' has no key 'widths'; it takes: drop_path_rate, type");
  EXPECT_EQ(error_of("model:\n  type: compact_resnet\n  depth: 3\n"),
            "recipe.yaml: model.depth at line 3: model type 'compact_resnet' has no key 'depth'; it takes: "
            "blocks, drop_path_rate, dropout, type, widths");
  // The resolved config holds the chosen type's keys only, and reads back the same.
  const Config c = parse_config("model: {type: resnet18}\n", "r.yaml");
  const std::string yaml = config_to_yaml(c);
  EXPECT_NE(yaml.find("model:\n  type: resnet18\n  drop_path_rate: 0\noptimizer:"), std::string::npos) << yaml;
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

TEST(Config, LoggingSectionAndIdxClassNames) {
  const Config defaults = parse_config("", "r.yaml");
  EXPECT_TRUE(defaults.logging.tensorboard);
  EXPECT_TRUE(defaults.logging.telemetry);
  EXPECT_TRUE(defaults.logging.flops);
  EXPECT_EQ(defaults.logging.telemetry_interval_s, 1.0);
  const Config c = parse_config("logging: {tensorboard: false, telemetry_interval_s: 0.5}\n"
                                "data: {idx: {class_names: fashion_mnist}}\n", "r.yaml");
  EXPECT_FALSE(c.logging.tensorboard);
  EXPECT_EQ(c.logging.telemetry_interval_s, 0.5);
  EXPECT_EQ(c.data.dataset.as<data::IdxOptions>().class_names, "fashion_mnist");
  EXPECT_NE(config_to_yaml(c).find("logging:"), std::string::npos);
  EXPECT_EQ(error_of("logging:\n  telemetry_interval_s: 0\n"),
            "recipe.yaml: logging.telemetry_interval_s at line 2: expected a positive number, got \"0\"");
  EXPECT_NE(error_of("data:\n  idx: {class_names: digits}\n").find("data.idx.class_names at line 2"),
            std::string::npos);
}

TEST(Config, LoggingMlflowKeys) {
  const Config defaults = parse_config("", "r.yaml");
  EXPECT_EQ(defaults.logging.mlflow.tracking_uri, "");  // off
  EXPECT_EQ(defaults.logging.mlflow.experiment, "");
  EXPECT_EQ(defaults.logging.mlflow.run_name, "");
  const Config c = parse_config("logging:\n  mlflow: {tracking_uri: 'http://127.0.0.1:5000', experiment: mnist, "
                                "run_name: first}\n", "r.yaml");
  EXPECT_EQ(c.logging.mlflow.tracking_uri, "http://127.0.0.1:5000");
  EXPECT_EQ(c.logging.mlflow.experiment, "mnist");
  EXPECT_EQ(c.logging.mlflow.run_name, "first");
  const Config again = parse_config(config_to_yaml(c), "saved.yaml");  // written and read back
  EXPECT_EQ(again.logging.mlflow.tracking_uri, "http://127.0.0.1:5000");
  EXPECT_EQ(again.logging.mlflow.run_name, "first");
  EXPECT_EQ(parse_config(config_to_yaml(defaults), "saved.yaml").logging.mlflow.tracking_uri, "");
  EXPECT_EQ(error_of("logging:\n  mlflow:\n    tracking_uri: localhost:5000\n"),
            "recipe.yaml: logging.mlflow.tracking_uri at line 3: expected the http:// or https:// address of an "
            "MLflow tracking server (e.g. http://127.0.0.1:5000), or \"\" for none, got \"localhost:5000\"");
  EXPECT_CONTAINS(error_of("logging:\n  mlflow: {uri: 'http://x'}\n"), "logging.mlflow.uri");
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

TEST(Schedule, LinearScalingWithTheGlobalBatch) {
  Config c;
  c.optimizer.lr = 0.1;
  c.data.batch_size = 256;
  c.data.shard_count = 2;
  EXPECT_EQ(global_batch_size(c), 512);
  EXPECT_DOUBLE_EQ(effective_lr(c), 0.1);  // off
  c.optimizer.lr_reference_batch = 128;
  EXPECT_DOUBLE_EQ(effective_lr(c), 0.4);
  c.optimizer.lr_reference_batch = 1024;
  EXPECT_DOUBLE_EQ(effective_lr(c), 0.05);
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
