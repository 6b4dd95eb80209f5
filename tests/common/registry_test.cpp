#include "common/registry.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "models/registry.h"
#include "models/compact_resnet.h"

namespace stoker {
namespace {

// An application's own model: anything with forward(Tensor) -> Tensor.
struct FlatLinearImpl : torch::nn::Module {
  FlatLinearImpl(int64_t in, int64_t out) : fc(register_module("fc", torch::nn::Linear(in, out))) {}
  torch::Tensor forward(const torch::Tensor& x) { return fc(x.flatten(1)); }
  torch::nn::Linear fc;
};
TORCH_MODULE(FlatLinear);

TEST(Registry, RefusesDuplicateNames) {
  Registry<int> registry("widget");
  registry.add("a", 1);
  try {
    registry.add("a", 2);
    FAIL() << "duplicate accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("a widget named 'a' is already registered"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(registry.get("a"), 1);
}

TEST(Registry, UnknownNameListsKnownOnes) {
  Registry<int> registry("widget");
  registry.add("beta", 2);
  registry.add("alpha", 1);
  try {
    registry.get("gamma");
    FAIL() << "unknown name accepted";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "unknown widget type 'gamma'; known: alpha, beta");
  }
}

int widget_fills = 0;
void add_two_widgets(Registry<int>& r) {
  ++widget_fills;
  r.add("one", 1);
  r.add("two", 2);
}
Registry<int>& widget_registry() { return lazy_registry<int, add_two_widgets>("widget"); }

void add_no_gadgets(Registry<int>&) {}
Registry<int>& gadget_registry() { return lazy_registry<int, add_no_gadgets>("gadget"); }

TEST(LazyRegistry, FilledOnceOnFirstUseAndKeepsWhatIsAddedLater) {
  EXPECT_EQ(widget_fills, 0);
  EXPECT_EQ(widget_registry().names(), (std::vector<std::string>{"one", "two"}));
  widget_registry().add("three", 3);
  EXPECT_EQ(&widget_registry(), &widget_registry());
  EXPECT_EQ(widget_fills, 1);
  EXPECT_EQ(widget_registry().get("three"), 3);
  // Another registry of the same entry type is another table, with its own kind in messages.
  EXPECT_FALSE(gadget_registry().contains("one"));
  try {
    gadget_registry().get("one");
    FAIL() << "a widget found among the gadgets";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "unknown gadget type 'one'; known: ");
  }
  EXPECT_THROW(widget_registry().add("two", 22), Error);
}

TEST(ModelRegistry, BuildsCompactResNetAndAcceptsApplicationModels) {
  const models::ModelShape shape{3, 5};
  torch::nn::AnyModule model = models::create_model(models::compact_resnet({4, 8}, {1, 2}), shape);
  EXPECT_EQ(model.forward(torch::randn({2, 3, 16, 16})).sizes(), (std::vector<int64_t>{2, 5}));

  models::model_registry().add("test_linear", {options_of<NoOptions>(), [](const TypeOptions&, const models::ModelShape& s) {
                                                 return torch::nn::AnyModule(FlatLinear(s.in_channels * 4, s.num_classes));
                                               }});
  EXPECT_EQ(models::create_model(models::model_options("test_linear"), shape).forward(torch::randn({2, 3, 2, 2})).sizes(),
            (std::vector<int64_t>{2, 5}));
}

TEST(ModelRegistry, UnknownTypeListsTheRegisteredModels) {
  try {
    models::model_options("resnet21");
    FAIL() << "unknown model type accepted";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.rfind("unknown model type 'resnet21'; known: ", 0), 0u) << message;
    for (const char* name : {"cifar_resnet20", "cifar_resnet56", "compact_resnet", "resnet18",
                             "resnet34", "resnet50", "resnet101"}) {
      EXPECT_NE(message.find(name), std::string::npos) << "'" << message << "' lacks " << name;
    }
  }
}

}  // namespace
}  // namespace stoker
