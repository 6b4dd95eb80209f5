// models/weights/pretrained.h: fitting a file's tensors into a model (renames, skips, the re-initialised head,
// and the errors that list what does not fit).
#include "models/weights/pretrained.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "models/registry.h"
#include "models/weights/state_dict.h"
#include "test_util.h"

namespace stoker::models::weights {
namespace {
using testing::error_of;

torch::nn::AnyModule build(const std::string& type, int64_t classes, int64_t channels = 3) {
  const ModelType t = model_registry().get(type);
  return t.create(*t.options(), {channels, classes});
}

NamedTensors tensors_of(const std::string& type, int64_t classes, int64_t seed) {
  torch::manual_seed(seed);
  torch::nn::AnyModule m = build(type, classes);
  NamedTensors out;
  for (const auto& [k, v] : state_of(*m.ptr())) out.emplace_back(k, v.clone());
  return out;
}

const std::vector<std::string> kFc = {"fc"};

TEST(Pretrained, AThousandClassHeadIsReinitialisedAndEverythingElseLoaded) {
  const NamedTensors file = tensors_of("resnet18", 1000, 1);
  torch::manual_seed(2);
  torch::nn::AnyModule model = build("resnet18", 10);
  const at::Tensor fc_before = model.ptr()->named_parameters()["fc.weight"].clone();
  const PretrainedFit fit = fit_pretrained(*model.ptr(), file, {}, kFc, "w.pth", "model.type resnet18");
  EXPECT_EQ(fit.reinitialised, (std::vector<std::string>{"fc.weight", "fc.bias"}));
  EXPECT_EQ(fit.head_modules(), (std::vector<std::string>{"fc"}));
  EXPECT_EQ(fit.loaded, static_cast<int64_t>(file.size()) - 2);
  const auto params = model.ptr()->named_parameters();
  EXPECT_TRUE(torch::equal(params["conv1.weight"], file.front().second));
  EXPECT_TRUE(torch::equal(params["fc.weight"], fc_before)) << "the head stays as built";
  // The same number of classes: the head loads too.
  torch::nn::AnyModule same = build("resnet18", 1000);
  EXPECT_TRUE(fit_pretrained(*same.ptr(), file, {}, kFc, "w.pth", "m").reinitialised.empty());
}

TEST(Pretrained, AnotherArchitectureIsAnErrorListingTenKeysThenACount) {
  torch::nn::AnyModule model = build("compact_resnet", 10);
  const std::string message = error_of([&] {
    fit_pretrained(*model.ptr(), tensors_of("resnet50", 1000, 1), {}, {"classifier"}, "r50.pth",
                   "model.type compact_resnet");
  });
  EXPECT_CONTAINS(message, "model.pretrained r50.pth does not fit model.type compact_resnet (");
  EXPECT_CONTAINS(message, "missing from the file: features.stem_conv.weight, ");
  EXPECT_CONTAINS(message, "the model does not have: ");
  EXPECT_CONTAINS(message, " more");
  EXPECT_CONTAINS(message, "it is probably another architecture (check model.type)");
}

TEST(Pretrained, AMisshapenTensorOutsideTheHeadIsAnErrorNamingBothShapes) {
  NamedTensors file = tensors_of("resnet18", 10, 1);
  torch::nn::AnyModule gray = build("resnet18", 10, /*channels=*/1);
  const std::string message = error_of([&] { fit_pretrained(*gray.ptr(), file, {}, kFc, "w.pth", "model.type resnet18"); });
  EXPECT_CONTAINS(message, "1 of another shape: conv1.weight ([64, 3, 7, 7] in the file, [64, 1, 7, 7] in the model)");
  EXPECT_CONTAINS(message, "model.pretrained_skip");
  // A head for another architecture (resnet18's 512 features into resnet50's 2048) is not "other classes".
  torch::nn::AnyModule r50 = build("resnet50", 10);
  NamedTensors fc = {{"fc.weight", torch::zeros({1000, 512})}};
  EXPECT_CONTAINS(error_of([&] { fit_pretrained(*r50.ptr(), fc, {}, kFc, "w.pth", "m"); }),
                  "fc.weight ([1000, 512] in the file, [10, 2048] in the model)");
  // Left initialised with model.pretrained_skip, the grayscale stem loads.
  PretrainedOptions skip;
  skip.skip = {"conv1"};
  const PretrainedFit fit = fit_pretrained(*gray.ptr(), file, skip, kFc, "w.pth", "m");
  EXPECT_EQ(fit.skipped, (std::vector<std::string>{"conv1.weight"}));
}

TEST(Pretrained, WrapperPrefixesGoAndRenamesMapOtherNames) {
  const NamedTensors plain = tensors_of("resnet18", 10, 1);
  NamedTensors ddp, lightning, backbone;
  for (const auto& [k, v] : plain) {
    ddp.emplace_back("module." + k, v);
    lightning.emplace_back("model._orig_mod." + k, v);
    backbone.emplace_back(k.rfind("fc.", 0) == 0 ? "head." + k.substr(3) : "backbone." + k, v);
  }
  torch::nn::AnyModule model = build("resnet18", 10);
  EXPECT_EQ(fit_pretrained(*model.ptr(), ddp, {}, kFc, "w", "m").stripped, (std::vector<std::string>{"module."}));
  EXPECT_EQ(fit_pretrained(*model.ptr(), lightning, {}, kFc, "w", "m").stripped,
            (std::vector<std::string>{"model.", "_orig_mod."}));
  EXPECT_CONTAINS(error_of([&] { fit_pretrained(*model.ptr(), backbone, {}, kFc, "w", "m"); }),
                  "the model does not have: backbone.bn1.bias");
  PretrainedOptions rename;
  rename.rename = {{"backbone.", ""}, {"head.", "fc."}};
  const PretrainedFit fit = fit_pretrained(*model.ptr(), backbone, rename, kFc, "w", "m");
  EXPECT_EQ(fit.loaded, static_cast<int64_t>(plain.size()));
  for (const auto& [k, v] : state_of(*model.ptr())) {
    for (const auto& [pk, pv] : plain) {
      if (pk == k) EXPECT_TRUE(torch::equal(v, pv)) << k;
    }
  }
}

TEST(Pretrained, OlderFilesWithoutBatchCountsLoadAndTheModelIsUnchangedOnError) {
  NamedTensors file;
  for (const auto& [k, v] : tensors_of("resnet18", 10, 1)) {
    if (k.find("num_batches_tracked") == std::string::npos) file.emplace_back(k, v);
  }
  torch::nn::AnyModule model = build("resnet18", 10);
  EXPECT_NO_THROW(fit_pretrained(*model.ptr(), file, {}, kFc, "w", "m"));
  torch::nn::AnyModule other = build("resnet18", 10);
  const at::Tensor before = other.ptr()->named_parameters()["conv1.weight"].clone();
  file.emplace_back("extra.weight", torch::zeros({1}));
  EXPECT_CONTAINS(error_of([&] { fit_pretrained(*other.ptr(), file, {}, kFc, "w", "m"); }),
                  "1 problem): 1 the model does not have: extra.weight");
  EXPECT_TRUE(torch::equal(other.ptr()->named_parameters()["conv1.weight"], before));
}

}  // namespace
}  // namespace stoker::models::weights
