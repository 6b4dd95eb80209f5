// --set on top of a recipe or a checkpoint's saved config (recipe/overrides.h): switching a registered
// type drops the file's keys of the old type and says so; a whole section as a mapping; list items.
#include "recipe/overrides.h"

#include <gtest/gtest.h>

#include "common/error.h"
#include "data/dataset.h"
#include "data/transform_options.h"
#include "models/compact_resnet.h"
#include "models/mlp.h"
#include "optim/schedule.h"
#include "recipe/config.h"
#include "recipe/run.h"
#include "test_config.h"
#include "test_util.h"
#include "trainer/checkpoint.h"

namespace stoker {
namespace {
namespace fs = std::filesystem;
using Notes = std::vector<std::string>;

constexpr const char* kRecipe = R"(data:
  type: idx
  idx: {class_names: fashion_mnist}
  train_transforms:
    - {type: horizontal_flip, p: 0.25}
model:
  type: compact_resnet
  widths: [8, 16]
  blocks: [1, 1]
  dropout: 0.1
optimizer:
  type: sgd
  lr: 0.2
  momentum: 0.8
  nesterov: false
  weight_decay: 0.001
schedule:
  type: step
  milestones: [3, 6]
  gamma: 0.5
)";

std::string error_of(const std::string& yaml, const Notes& sets) {
  try {
    parse_config(yaml, "r.yaml", sets);
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "accepted: " << ::testing::PrintToString(sets);
  return "";
}

TEST(Overrides, SwitchingTheOptimizerTypeDropsTheFilesKeysOfTheOldType) {
  Notes notes;
  const Config c = parse_config(kRecipe, "r.yaml", {"optimizer.type=adamw"}, &notes);
  EXPECT_EQ(c.optimizer.algorithm.type(), "adamw");
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 0.2);  // keys both types have keep the file's values
  EXPECT_DOUBLE_EQ(c.optimizer.weight_decay, 0.001);
  EXPECT_EQ(c.optimizer.algorithm.as<AdamWKeys>().betas, AdamWKeys().betas);  // the new type's own: its defaults
  EXPECT_EQ(notes, Notes{"optimizer.type: adamw (was sgd in r.yaml): dropped the keys adamw does not have: "
                         "momentum, nesterov"});
  EXPECT_EQ(config_to_yaml(parse_config(config_to_yaml(c), "again.yaml")), config_to_yaml(c));

  // A file that leaves the type at its default (sgd) has sgd's keys dropped the same way.
  notes.clear();
  parse_config("optimizer: {momentum: 0.5}\n", "r.yaml", {"optimizer.type=adamw"}, &notes);
  EXPECT_EQ(notes, Notes{"optimizer.type: adamw (was sgd in r.yaml): dropped the keys adamw does not have: "
                         "momentum"});
  // The type the file has, or set back to it: nothing dropped, nothing said.
  notes.clear();
  const Config same = parse_config(kRecipe, "r.yaml", {"optimizer.type=adamw", "optimizer.type=sgd"}, &notes);
  EXPECT_DOUBLE_EQ(same.optimizer.algorithm.as<SgdKeys>().momentum, 0.8);
  EXPECT_TRUE(notes.empty()) << notes.front();
}

TEST(Overrides, ACommandLineKeyOfTheWrongTypeStaysAnError) {
  const std::string adamw_keys =
      "it takes: betas, decay_norm_and_bias, eps, head_lr_scale, implementation, layer_decay, lr, lr_reference_batch, "
      "type, weight_decay";
  EXPECT_EQ(error_of(kRecipe, {"optimizer.type=adamw", "optimizer.momentum=0.9"}),
            "--set optimizer.momentum: optimizer type 'adamw' has no key 'momentum'; " + adamw_keys);
  EXPECT_EQ(error_of(kRecipe, {"optimizer.momentum=0.9", "optimizer.type=adamw"}),
            "--set optimizer.momentum: optimizer type 'adamw' has no key 'momentum'; " + adamw_keys);
  // A key the file gives for neither type is still the file's error.
  EXPECT_EQ(error_of("optimizer: {type: sgd, dampening: 0.1}\n", {"optimizer.type=adamw"}),
            "r.yaml: optimizer.dampening at line 1: optimizer type 'adamw' has no key 'dampening'; " + adamw_keys);
}

TEST(Overrides, SwitchingTheModelScheduleDataSetAndTransformTypes) {
  Notes notes;
  Config c = parse_config(kRecipe, "r.yaml", {"model.type=mlp", "model.hidden=[32]"}, &notes);
  EXPECT_EQ(c.model.type(), "mlp");
  EXPECT_EQ(c.model.as<models::MlpOptions>().hidden, (std::vector<int64_t>{32}));
  EXPECT_EQ(notes, Notes{"model.type: mlp (was compact_resnet in r.yaml): dropped the keys mlp does not have: "
                         "widths, blocks, dropout"});
  notes.clear();
  c = parse_config(kRecipe, "r.yaml", {"model.type=resnet18"}, &notes);
  EXPECT_EQ(c.model.type(), "resnet18");
  EXPECT_EQ(notes, Notes{"model.type: resnet18 (was compact_resnet in r.yaml): dropped the keys resnet18 does not "
                         "have: widths, blocks, dropout"});
  // In the order the config is read: data, model, optimizer, schedule.
  notes.clear();
  c = parse_config(kRecipe, "r.yaml",
                   {"schedule.type=cosine", "data.type=synthetic", "data.train_transforms[0].type=random_crop",
                    "data.train_transforms[0].size=24"},
                   &notes);
  EXPECT_EQ(c.schedule.curve.type(), "cosine");
  EXPECT_EQ(c.data.dataset.type(), "synthetic");
  EXPECT_EQ(c.data.train_transforms.at(0).as<data::RandomCropOptions>().size, 24);
  EXPECT_EQ(notes, (Notes{"data.type: synthetic (was idx in r.yaml): dropped the keys synthetic does not have: "
                          "idx.class_names",
                          "data.train_transforms[0].type: random_crop (was horizontal_flip in r.yaml): dropped the "
                          "keys random_crop does not have: p",
                          "schedule.type: cosine (was step in r.yaml): dropped the keys cosine does not have: "
                          "milestones, gamma"}));
  // One item of a list by its index; an index past the end is an error naming the list's length.
  EXPECT_DOUBLE_EQ(parse_config(kRecipe, "r.yaml", {"data.train_transforms[0].p=0.75"})
                       .data.train_transforms.at(0)
                       .as<data::HorizontalFlipOptions>()
                       .p,
                   0.75);
  EXPECT_EQ(error_of(kRecipe, {"data.train_transforms[2].p=0.5"}),
            "--set data.train_transforms[2].p=0.5: train_transforms[2] is not an item of a list (train_transforms "
            "has 1 item(s)); index the items the config has, from 0");
  EXPECT_EQ(error_of(kRecipe, {"optimizer.type=adamw", "optimizer.betas[1]=0.99"}),
            "--set optimizer.betas[1]=0.99: the config gives no betas to take item [1] of (defaults are not "
            "indexed); set the whole list instead");
  EXPECT_EQ(parse_config(kRecipe, "r.yaml", {"model.widths[1]=24"}).model.as<models::CompactResNetOptions>().widths,
            (std::vector<int64_t>{8, 24}));
}

TEST(Overrides, AWholeSectionAsAMapping) {
  Notes notes;
  Config c = parse_config(kRecipe, "r.yaml", {"optimizer={type: adamw, lr: 0.002}"}, &notes);
  EXPECT_EQ(c.optimizer.algorithm.type(), "adamw");
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 0.002);
  EXPECT_DOUBLE_EQ(c.optimizer.weight_decay, OptimizerOptions().weight_decay);  // not given: the default
  EXPECT_EQ(notes, Notes{"optimizer: the whole section from --set; dropped the keys r.yaml gave it: type, lr, "
                         "momentum, nesterov, weight_decay (keys not given take their defaults)"});
  notes.clear();
  c = parse_config(kRecipe, "r.yaml",
                   {"model={type: mlp, pool: 2}", "schedule={type: one_cycle}",
                    "data={type: synthetic, synthetic: {height: 8, width: 8}}"},
                   &notes);
  EXPECT_EQ(c.model.as<models::MlpOptions>().pool, 2);
  EXPECT_EQ(c.schedule.curve.type(), "one_cycle");
  EXPECT_EQ(c.data.dataset.as<data::SyntheticOptions>().height, 8);
  EXPECT_TRUE(c.data.train_transforms.empty());
  ASSERT_EQ(notes.size(), 3u);
  EXPECT_EQ(notes[2], "data: the whole section from --set; dropped the keys r.yaml gave it: type, idx, "
                      "train_transforms (keys not given take their defaults)");
  // Inside the mapping, a key of another type is the --set's error; a section takes a mapping.
  EXPECT_EQ(error_of(kRecipe, {"optimizer={type: adamw, nesterov: true}"}),
            "--set optimizer.nesterov: optimizer type 'adamw' has no key 'nesterov'; it takes: betas, "
            "decay_norm_and_bias, eps, head_lr_scale, implementation, layer_decay, lr, lr_reference_batch, type, "
            "weight_decay");
  EXPECT_EQ(error_of(kRecipe, {"optimizer=adamw"}),
            "--set optimizer=adamw: expected section.key=value (e.g. train.epochs=3), or a whole section as a "
            "mapping (e.g. --set 'optimizer={type: adamw, lr: 0.002}')");
  EXPECT_EQ(error_of(kRecipe, {"trainer={epochs: 3}"}), "--set trainer: unknown section 'trainer'; did you mean train?");
}

// `trainer --resume RUN --set optimizer.type=adamw`: the checkpoint's saved config is the "file" whose
// old-type keys are dropped; the switch breaks exactness (refused unless allowed), and the resumed run
// starts the new optimizer's state afresh.
TEST(Overrides, AResumedRunSwitchesTheOptimizerType) {
  testing::TempDir data, runs;
  testing::write_synthetic_idx_dataset(data.path(), 128, 64, 12);
  TrainRequest first;
  first.config = testing::tiny_config(data.path(), runs.path());
  first.config.train.epochs = 1;
  const TrainOutcome one = run_training(first);

  // As the trainer program resumes: the checkpoint's saved config with the --set overrides.
  const fs::path last = one.run_dir / "checkpoints" / "last.pt";
  const std::string saved = read_checkpoint_config(last);
  const std::string source = last.string() + " (its saved config)";
  TrainRequest second;
  second.config = parse_config(saved, source, {"optimizer.type=adamw", "optimizer.lr=0.002", "train.epochs=2"},
                               &second.config_notes);
  EXPECT_EQ(second.config_notes, Notes{"optimizer.type: adamw (was sgd in " + source +
                                       "): dropped the keys adamw does not have: momentum, nesterov"});
  second.resume = one.run_dir;
  try {
    run_training(second);
    ADD_FAILURE() << "a resume with another optimizer.type was accepted without allow_config_change";
  } catch (const Error& e) {
    EXPECT_CONTAINS(std::string(e.what()), "optimizer.type (sgd -> adamw)");
  }
  second.allow_config_change = true;
  const TrainOutcome two = run_training(second);
  EXPECT_EQ(two.state.epoch, 2);
  const std::string log = testing::read_bytes(one.run_dir / "train.log");
  EXPECT_CONTAINS(log, second.config_notes.front());
  EXPECT_CONTAINS(log, "optimizer.type: adamw (was sgd): the checkpoint's sgd state is left out");
  const std::string resumed = read_checkpoint_config(one.run_dir / "checkpoints" / "last.pt");
  EXPECT_CONTAINS(resumed, "type: adamw");
  EXPECT_EQ(resumed.find("momentum"), std::string::npos) << resumed;

  // Another model cannot take the checkpoint's weights: refused even with changes allowed.
  TrainRequest third;
  third.config = parse_config(saved, source, {"model.type=mlp"}, &third.config_notes);
  third.resume = one.run_dir;
  third.allow_config_change = true;
  EXPECT_CONTAINS(testing::error_of([&] { run_training(third); }),
                  "with model.type mlp: it holds compact_resnet weights, which model.type mlp cannot load");

  // A key of the old type given for the new one on the command line is an error, as with a recipe.
  try {
    parse_config(saved, source, {"optimizer.type=adamw", "optimizer.nesterov=false"});
    ADD_FAILURE() << "optimizer.nesterov was accepted for adamw";
  } catch (const Error& e) {
    EXPECT_CONTAINS(std::string(e.what()), "--set optimizer.nesterov: optimizer type 'adamw' has no key 'nesterov'");
  }
}

}  // namespace
}  // namespace stoker
