// Extra, live: the checked-in golden headers (tests/golden/*_golden.h) are what their generators
// write with the libtorch venv's PyTorch today, so that nobody edits one by hand or changes a
// generator without regenerating (floating-point numbers within the tolerance of the test that reads
// them). Skipped, saying why, without the venv's Python (or torchvision, for the ResNet header). The
// tests that use the headers need no Python.
#include <gtest/gtest.h>

#include <filesystem>
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "test_util.h"

namespace stoker {
namespace {
namespace fs = std::filesystem;

// The header without its first line, which names the torch version that wrote it.
std::string without_first_line(const std::string& text) {
  const auto end = text.find('\n');
  return end == std::string::npos ? "" : text.substr(end + 1);
}

// A header as its text between numbers and the numbers themselves: the text must be what the
// generator writes, the numbers only within the tolerance of the test that reads them, because
// float32 kernels (oneDNN, BLAS) round differently on CPUs with other instruction sets (resnet18's
// first logit is 0.0177985 on AVX-512 and 0.0177955 on an AVX2-only CPU).
struct Token {
  bool number = false;  // a floating-point number (integers, like shapes and counts, are text)
  std::string text;  // the text, or the number as written
  double value = 0;
  int line = 1;
  int group = 0;  // which innermost {...} the number is in (0: none): one model's logits in one mode
  bool integer = false;  // written without '.' or exponent: a shape or count, or a float that is whole
};

bool starts_number(const std::string& s, size_t i) {
  if (i > 0 && (std::isalnum(static_cast<unsigned char>(s[i - 1])) || s[i - 1] == '_')) return false;  // resnet18
  const auto digit = [&](size_t j) { return j < s.size() && std::isdigit(static_cast<unsigned char>(s[j])); };
  if (digit(i)) return true;
  if (s[i] == '-' || s[i] == '+') return digit(i + 1) || (i + 2 < s.size() && s[i + 1] == '.' && digit(i + 2));
  return s[i] == '.' && digit(i + 1);
}

std::vector<Token> tokenize(const std::string& s) {
  std::vector<Token> tokens;
  int line = 1;
  int groups = 0;
  std::vector<int> open;  // the groups of the braces open here, innermost last
  for (size_t i = 0; i < s.size();) {
    if (starts_number(s, i)) {
      char* end = nullptr;
      const double value = std::strtod(s.c_str() + i, &end);
      const auto length = static_cast<size_t>(end - (s.c_str() + i));
      const std::string written = s.substr(i, length);
      const bool integer = written.find_first_of(".eE") == std::string::npos;
      tokens.push_back({true, written, value, line, open.empty() ? 0 : open.back(), integer});
      i += length;
      continue;
    }
    if (tokens.empty() || tokens.back().number) tokens.push_back({false, "", 0, line});
    if (s[i] == '\n') ++line;
    if (s[i] == '{') open.push_back(++groups);
    if (s[i] == '}' && !open.empty()) open.pop_back();
    tokens.back().text += s[i++];
  }
  return tokens;
}

// How closely a regenerated number must match the checked-in one: the tolerance of the test that
// reads the header (tests/golden/README.md), relative to max(1, |value|) or to the largest |value|
// of the innermost braces holding it. Integers (shapes, counts) must be equal.
//
// A network's logits are compared as the tests that read them compare them: within 1e-4 of the
// largest |logit| of that model in that mode (one {...} of the header), never as an absolute number.
// float32's rounding differs between CPUs (oneDNN and the BLAS block their reductions by the vector
// width: AVX2, AVX-512, AMX), and the difference grows with the depth of the network and with the
// size of its activations, which the largest logit measures: EfficientNet-B0's eval logits reach 87
// while one of them is 0.66, and an AMD Zen 5 wrote that one 1.1e-4 away from the AVX-512 Xeon's
// (1.3e-6 of the largest, 80 times inside the tolerance). 1e-4 is about 800 float32 epsilons: room
// for one rounding step in each of the ~100 layers of the deepest golden network, with margin.
struct Tolerance {
  double relative = 0;
  bool of_largest = false;  // relative to the largest |value| in the same innermost {...}
  double bytes_differing = 0;  // quoted images (two letters a-p a byte): the share of bytes that may differ
};
Tolerance tolerance_of(const std::string& name) {
  if (name == "optim") return {1e-5, false};     // Optimizers.MatchPyTorchGoldenValues
  if (name == "schedule") return {1e-9, false};  // Schedule.EveryCurveEqualsTorchsSchedulers
  if (name == "timm") return {1e-6, false};      // Mixup.BoxesAndTargetsEqualTimms, Losses.EqualTimms*
  if (name == "lamb") return {1e-9, false};      // Lamb.MatchesTimmsGoldenValues
  if (name == "layer_decay") return {1e-12, false};  // LayerGroups.*, ParamGroups.LayerDecayEqualsTimms*
  // AugmentOps.* (float32 magnitudes, exact bytes): two float32 ulps, since ATen's linspace rounds
  // the last bit differently without vector units (67.6737137 against 67.6737213 under
  // ATEN_CPU_CAPABILITY=default, scripts/test_isa_matrix.sh).
  // The augmented images (quoted, two letters a-p a byte) as AugmentOps.EveryOpEqualsTorchvision...
  // reads them: without vector units torchvision's float32 ops round some bytes the other way, and a
  // geometric op then takes a neighbouring source pixel: at most 2 pixels in 100 may differ.
  if (name == "augment") return {2.5e-7, false, 0.02};
  // ResNet.MatchesCheckedInTorchvisionLogits, Vit/ConvNext.MatchesCheckedInTorchvisionLogitsAndFlops,
  // {EfficientNet,MobileNetV3}.MatchesCheckedInTorchvisionLogits: 1e-4 of each model's largest logit
  // in each mode (they differ by two orders of magnitude between the models and modes of a header).
  return {1e-4, true};
}

bool letter_bytes(const std::string& s) {
  return !s.empty() && s.size() % 2 == 0 &&
         std::all_of(s.begin(), s.end(), [](char c) { return c >= 'a' && c <= 'p'; });
}

// Text equal but for its quoted letter-encoded images, of which at most `share` of the bytes differ.
bool same_text(const std::string& a, const std::string& b, double share) {
  if (a == b) return true;
  if (share <= 0) return false;
  size_t i = 0, j = 0;
  while (i < a.size() || j < b.size()) {
    const size_t ea = std::min(a.find('"', i), a.size()), eb = std::min(b.find('"', j), b.size());
    const std::string x = a.substr(i, ea - i), y = b.substr(j, eb - j);
    if (x != y) {
      if (!letter_bytes(x) || x.size() != y.size() || !letter_bytes(y)) return false;
      size_t differing = 0;
      for (size_t k = 0; k < x.size(); k += 2) differing += x.compare(k, 2, y, k, 2) != 0 ? 1 : 0;
      if (static_cast<double>(differing) > share * static_cast<double>(x.size() / 2)) return false;
    }
    if ((ea == a.size()) != (eb == b.size())) return false;
    i = ea + 1;
    j = eb + 1;
  }
  return true;
}

// "" when `got` is `want` up to the tolerance; otherwise the first difference, with its line.
std::string compare_headers(const std::string& want, const std::string& got, const Tolerance& tolerance) {
  const std::vector<Token> a = tokenize(want), b = tokenize(got);
  std::map<int, double> largest;  // per group, of the checked-in values
  for (const Token& t : a) {
    if (t.number) largest[t.group] = std::max(largest[t.group], std::abs(t.value));
  }
  for (size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
    if (i >= a.size() || i >= b.size()) {
      return "line " + std::to_string(i < a.size() ? a[i].line : b[i].line) + ": one header ends early";
    }
    const Token& x = a[i];
    const Token& y = b[i];
    const double scale = tolerance.of_largest ? largest[x.group] : std::max(1.0, std::abs(x.value));
    // Two integers must be equal; a float may be written "16" by one run and "15.999999" by another.
    const double allowed = x.integer && y.integer ? 0.0 : tolerance.relative * scale;
    const bool same = x.number == y.number &&
                      (x.number ? std::abs(x.value - y.value) <= allowed
                                         : same_text(x.text, y.text, tolerance.bytes_differing));
    if (!same) {
      return "line " + std::to_string(x.line + 1) + ":\n  checked in: " + x.text + "\n  generated:  " + y.text +
             (x.number && y.number ? " (beyond the tolerance " + std::to_string(tolerance.relative) + ")" : "");
    }
  }
  return "";
}

class GoldenHeadersPython : public ::testing::TestWithParam<const char*> {};

TEST_P(GoldenHeadersPython, CheckedInHeaderIsWhatItsGeneratorWrites) {
  const std::string name = GetParam();
  std::string why;
  const fs::path python = testing::venv_python(&why);
  if (python.empty()) GTEST_SKIP() << why;
  const bool needs_torchvision =
      name == "resnet" || name == "augment" || name == "vit_convnext" || name == "mobile" || name == "layer_decay";
  if (needs_torchvision && testing::shell("'" + python.string() + "' -c 'import torchvision' >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "torchvision is not installed in " << python.string() << "; install it with `bash bench/setup.sh`";
  }
  const bool needs_timm = name == "timm" || name == "lamb" || name == "vit_convnext" || name == "layer_decay";
  if (needs_timm && testing::shell("'" + python.string() + "' -c 'import timm' >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "timm is not importable by " << python.string()
                 << "; install it beside the venv and set PYTHONPATH (tests/golden/timm_golden.py says how)";
  }
  const fs::path folder = fs::path(STOKER_SOURCE_DIR) / "tests" / "golden";
  const fs::path script = folder / (name + "_golden.py");
  const fs::path checked_in = folder / (name + "_golden.h");
  testing::TempDir tmp;
  const fs::path generated = tmp / (name + "_golden.h");
  const fs::path log = tmp / "generator.log";
  const std::string command = "'" + python.string() + "' '" + script.string() + "' '" + generated.string() +
                              "' >'" + log.string() + "' 2>&1";
  ASSERT_EQ(testing::shell(command), 0) << command << "\n" << testing::read_bytes(log);
  const std::string want = without_first_line(testing::read_bytes(checked_in));
  const std::string got = without_first_line(testing::read_bytes(generated));
  ASSERT_FALSE(got.empty()) << generated;
  const std::string difference = compare_headers(want, got, tolerance_of(name));
  EXPECT_EQ(difference, "") << checked_in << " differs from what " << script
                            << " writes now; regenerate it (see tests/golden/README.md). First difference at "
                            << difference;
}

// The comparison itself, on made-up headers: rounding in the sixth digit passes, an edit does not.
TEST(GoldenHeaders, ComparisonAllowsRoundingButNotEdits) {
  const std::string checked_in = "{\"resnet18\", {2, 3, 64, 64}, 10,\n {0.017798498, -0.73873192, 3.48346}}";
  EXPECT_EQ(compare_headers(checked_in, checked_in, tolerance_of("resnet")), "");
  EXPECT_EQ(compare_headers(checked_in, "{\"resnet18\", {2, 3, 64, 64}, 10,\n {0.017795518, -0.73873192, 3.48346}}",
                            tolerance_of("resnet")),
            "");
  EXPECT_NE(compare_headers(checked_in, "{\"resnet18\", {2, 3, 64, 64}, 10,\n {0.0185, -0.73873192, 3.48346}}",
                            tolerance_of("resnet")),
            "");  // beyond 1e-4 of the largest logit
  EXPECT_NE(compare_headers(checked_in, "{\"resnet34\", {2, 3, 64, 64}, 10,\n {0.017798498, -0.73873192, 3.48346}}",
                            tolerance_of("resnet")),
            "");  // text
  EXPECT_NE(compare_headers(checked_in, "{\"resnet18\", {2, 3, 64, 65}, 10,\n {0.017798498, -0.73873192, 3.48346}}",
                            tolerance_of("resnet")),
            "");  // an integer
  EXPECT_NE(compare_headers(checked_in, "{\"resnet18\", {2, 3, 64, 64}, 10,\n {0.017798498, -0.73873192}}",
                            tolerance_of("resnet")),
            "");  // a value fewer
  EXPECT_NE(compare_headers("{0.1, 0.2}", "{0.1, 0.2000001}", tolerance_of("schedule")), "");
  // The scale is the largest |value| of the same braces: the logit an AMD Zen 5 wrote 1.1e-4 away
  // from the checked-in one passes beside a logit of 86.7; a model whose logits are all small keeps
  // its own, tighter scale, so that the large model's logits lend it nothing.
  const std::string mobile = "{\"efficientnet_b0\", {0.05, -0.51}, {-9.68, 0.65941882133483887, -86.688377}},\n"
                             " {\"mobilenet_v3_small\", {0.12994976, -0.1059299}, {-0.0947195, -0.1656305}}";
  EXPECT_EQ(compare_headers(mobile, mobile, tolerance_of("mobile")), "");
  std::string zen5 = mobile;
  zen5.replace(zen5.find("0.65941882133483887"), 19, "0.65952914953231812");
  EXPECT_EQ(compare_headers(mobile, zen5, tolerance_of("mobile")), "");
  std::string small_off = mobile;
  small_off.replace(small_off.find("-0.0947195"), 10, "-0.0948195");  // 1e-4 off a largest of 0.166
  EXPECT_NE(compare_headers(mobile, small_off, tolerance_of("mobile")), "");
  EXPECT_EQ(compare_headers("{0.1, 0.2}", "{0.1, 0.200000001}", tolerance_of("optim")), "");
}

// Augmented images: one byte of 100 rounded the other way passes; three of 100, a changed length or
// an edit outside the image do not; other headers' strings stay exact.
TEST(GoldenHeaders, AugmentImagesAllowAByteInFiftyButNotMore) {
  const std::string image(200, 'c');  // 100 bytes
  const auto header = [](const std::string& im, const char* op) {
    return std::string("{AugmentSpace::kRandAugment, \"") + op + "\", 0, 1, 0.5, 0,\n \"" + im + "\"},";
  };
  std::string one = image, three = image;
  one.replace(10, 2, "cd");
  for (int k : {0, 40, 80}) three.replace(static_cast<size_t>(k), 2, "pp");
  EXPECT_EQ(compare_headers(header(image, "Rotate"), header(one, "Rotate"), tolerance_of("augment")), "");
  EXPECT_NE(compare_headers(header(image, "Rotate"), header(three, "Rotate"), tolerance_of("augment")), "");
  EXPECT_NE(compare_headers(header(image, "Rotate"), header(image + "cc", "Rotate"), tolerance_of("augment")), "");
  EXPECT_NE(compare_headers(header(image, "Rotate"), header(image, "Rotato"), tolerance_of("augment")), "");
  EXPECT_NE(compare_headers(header(image, "Rotate"), header(one, "Rotate"), tolerance_of("resnet")), "");
  // A magnitude that one CPU rounds to a whole number is written without its point (%.9g).
  EXPECT_EQ(compare_headers("{14.9333344, 15.999999, 17.0666656}", "{14.9333344, 16, 17.0666656}",
                            tolerance_of("augment")), "");
  EXPECT_NE(compare_headers("{12, 16,", "{12, 17,", tolerance_of("augment")), "");  // integers stay exact
}

INSTANTIATE_TEST_SUITE_P(Golden, GoldenHeadersPython,
                         ::testing::Values("optim", "schedule", "resnet", "timm", "lamb", "augment", "vit_convnext",
                                           "mobile", "layer_decay"),
                         [](const ::testing::TestParamInfo<const char*>& info) { return std::string(info.param); });

}  // namespace
}  // namespace stoker
