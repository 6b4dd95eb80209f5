// `trainer`: the command-line program. It parses arguments and calls the library; nothing here
// that a library user would miss. `trainer --help` lists the subcommands (train, the default, then
// bench-data, bench-step, eval, predict, doctor, report, export, pack); `trainer SUBCOMMAND --help` lists the flags of each.
//
// The file reads top to bottom: the flags each subcommand takes, the subcommand table that names
// each with its flags and its handler (apps/trainer_commands.h), then the parsing (CLI11) and its
// error messages. A new subcommand is one row in kSubcommands, its flags, and its handler.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "apps/trainer_commands.h"
#include "common/build_info.h"
#include "common/error.h"
#include "common/log.h"
#include "trainer/callbacks.h"

namespace {

using stoker::apps::Args;

// ---- the flags: value checks, the flags several subcommands share, then each subcommand's ---------

// Value checks run on the text before CLI11 converts it; what they return completes "--flag ...".
CLI::Validator positive_whole_number() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        size_t used = 0;
        long long n = 0;
        try {
          n = std::stoll(value, &used);
        } catch (const std::exception&) {
        }
        if (used == value.size() && n > 0) return "";
        return fmt::format("takes a positive whole number, not '{}'", value);
      },
      "");
}

CLI::Validator whole_number_in(long long lo, long long hi) {
  return CLI::Validator(
      [lo, hi](std::string& value) -> std::string {
        size_t used = 0;
        long long n = 0;
        try {
          n = std::stoll(value, &used);
        } catch (const std::exception&) {
        }
        if (used == value.size() && n >= lo && n <= hi) return "";
        return fmt::format("takes a whole number from {} to {}, not '{}'", lo, hi, value);
      },
      "");
}

CLI::Validator one_of(const std::vector<std::string>& choices) {
  return CLI::Validator(
      [choices](std::string& value) -> std::string {
        if (std::find(choices.begin(), choices.end(), value) != choices.end()) return "";
        const std::vector<std::string> first(choices.begin(), choices.end() - 1);
        return fmt::format("takes {} or {}, not '{}'", fmt::join(first, ", "), choices.back(), value);
      },
      "");
}

// A flag with one value; given twice, the last one counts.
template <typename T>
CLI::Option* value_flag(CLI::App& app, const std::string& name, T& into, const std::string& type,
                        const std::string& help) {
  return app.add_option(name, into, help)->type_name(type)->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
}

// --set KEY.PATH=VALUE, repeatable; each takes one value, so that predict's IMAGE... stay images.
void set_flag(CLI::App& app, Args& a, const std::string& help) {
  app.add_option("--set", a.overrides, help)
      ->type_name("KEY.PATH=VALUE")
      ->expected(1)
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
}

void recipe_flags(CLI::App& app, Args& a) {
  value_flag(app, "--config", a.config, "FILE", "the recipe, e.g. configs/fashion_mnist.yaml")->required();
  set_flag(app, a, "override one config value; repeatable (e.g. --set train.epochs=3)");
  app.add_flag("--print-config", a.print_config, "print the resolved config and exit");
}

void train_flags(CLI::App& app, Args& a) {
  value_flag(app, "--config", a.config, "FILE", "the recipe, e.g. configs/fashion_mnist.yaml (with --resume: the\n"
             "run's saved config when left out)");
  set_flag(app, a, "override one config value; repeatable (e.g. --set train.epochs=3)");
  app.add_flag("--print-config", a.print_config, "print the resolved config and exit");
  value_flag(app, "--resume", a.resume, "RUN",
             "continue a run with its saved config: its directory (runs/<name>/<time>) or a\n"
             "checkpoint file; --config/--set changes are logged");
  app.add_flag("--allow-config-change", a.allow_config_change,
               "with --resume: accept changes that break exactness (data.*, model.*, schedule.*,\n"
               "train.epochs, batches per step, optimizer.type, precision, seed)");
  app.parse_complete_callback([&app] {
    if (app.count("--config") == 0 && app.count("--resume") == 0) {
      throw CLI::RequiredError("train needs --config FILE (or --resume RUN to continue a run with its saved config)",
                               static_cast<int>(CLI::ExitCodes::RequiredError));
    }
  });
  value_flag(app, "--progress", a.progress, "MODE", "auto (a live bar on a terminal; default), bar, or lines")
      ->check(one_of({"auto", "bar", "lines"}));
}

void bench_data_flags(CLI::App& app, Args& a) {
  recipe_flags(app, a);
  value_flag(app, "--batches", a.batches, "N", "batches to time (default 200, after 5 warm-up batches)")
      ->check(positive_whole_number());
  value_flag(app, "--split", a.split, "train|test", "which loader to time (default train)")->check(one_of({"train", "test"}));
  value_flag(app, "--output", a.output, "float|uint8",
             "normalised float batches as training gets them (default), or the uint8\n"
             "batches as built (to compare with loaders that output uint8)")
      ->check(one_of({"float", "uint8"}));
}

void bench_step_flags(CLI::App& app, Args& a) {
  recipe_flags(app, a);
  value_flag(app, "--steps", a.steps, "N", "steps to time (default 50, after 10 warm-up steps)")->check(positive_whole_number());
}

void doctor_flags(CLI::App& app, Args& a) {
  recipe_flags(app, a);
  value_flag(app, "--steps", a.doctor_steps, "N", "timed steps per rung of the ladder (default 30, after 5 warm-up steps)")
      ->check(positive_whole_number());
  app.add_flag("--tune", a.tune, "search data.workers, prefetch_factor and device_prefetch by measurement");
  value_flag(app, "--tune-budget", a.tune_budget, "SECONDS", "time --tune may take (default 90)")
      ->check(CLI::PositiveNumber);
  value_flag(app, "--trace", a.trace, "FILE", "write the full rung's timeline there (Trace Event JSON, ui.perfetto.dev)");
  value_flag(app, "--save-to", a.save_to, "RUN_DIR",
             "also save the ladder as RUN_DIR/doctor.json, which `trainer report RUN_DIR` shows");
  app.add_flag("--batch", a.batch,
               "measure samples/s per batch size and pick the knee (the size past which a doubling gains\n"
               "less than --knee), with the learning rate rescaled by the recipe's rule");
  value_flag(app, "--max-batch", a.max_batch, "N", "largest batch --batch tries (default 4096)")->check(positive_whole_number());
  value_flag(app, "--knee", a.knee, "FRACTION",
             "--batch stops where doubling the batch gains less than this share of samples/s (default 0.1)")
      ->check(CLI::PositiveNumber);
  app.add_flag("--check", a.check,
               "the performance contract: exit status 1 (with the diagnosis) when the full pipeline trains\n"
               "below --min-ratio of the device-cached ceiling, 0 otherwise");
  value_flag(app, "--min-ratio", a.min_ratio, "FRACTION", "--check's minimum share of the ceiling (default 0.9)")
      ->check(CLI::Range(0.01, 1.0));
  value_flag(app, "--write", a.write_to, "FILE",
             "write what --tune and --batch find into a copy of the recipe there (comments and order kept)");
  app.add_flag("--in-place", a.in_place, "write what --tune and --batch find into the recipe itself");
  value_flag(app, "--memory-budget", a.memory_budget_mb, "MB",
             "memory the ladder's caches (and --batch on the CPU) may use (default: half the free memory)")
      ->check(positive_whole_number());
}

void checkpoint_flag(CLI::App& app, Args& a) {
  value_flag(app, "--checkpoint", a.checkpoint, "RUN|FILE",
             "a run directory (its checkpoints/last.pt), RUN:best or RUN:last, or a .pt file")
      ->required();
}

void eval_flags(CLI::App& app, Args& a) {
  checkpoint_flag(app, a);
  value_flag(app, "--config", a.config, "FILE", "the recipe whose test split to evaluate on (default: the\n"
             "checkpoint's saved config)");
  set_flag(app, a, "override one config value; repeatable (e.g. --set data.root=other/)");
  app.add_flag("--print-config", a.print_config, "print the resolved config and exit");
}

void predict_flags(CLI::App& app, Args& a) {
  checkpoint_flag(app, a);
  value_flag(app, "--config", a.config, "FILE", "the recipe whose eval transforms to use (default: the checkpoint's)");
  set_flag(app, a, "override one value of that config; repeatable");
  value_flag(app, "--top", a.top, "K", "classes to print per image (default 5)")->check(positive_whole_number());
  app.add_flag("--ema", a.ema, "use the checkpoint's EMA weights (train.ema_decay)");
  app.add_option("IMAGE", a.images, "one or more image files (JPEG or PNG)")->type_name("")->required();
}

void report_flags(CLI::App& app, Args& a) {
  app.add_option("RUN_DIR", a.run_dir, "the run directory (runs/<name>/<time>)")->type_name("")->required();
  app.add_option("--compare", a.compare, "another run directory to overlay; repeatable")
      ->type_name("RUN_DIR")
      ->expected(1)
      ->allow_extra_args(false)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  value_flag(app, "--output", a.output_file, "FILE", "where to write the page (default RUN_DIR/report.html)");
}

void export_flags(CLI::App& app, Args& a) {
  checkpoint_flag(app, a);
  value_flag(app, "--output", a.output_file, "FILE", "the file to write: .onnx, .ts (TorchScript), .pth (state dict)\n"
             "or .safetensors; FILE.json is written beside it")->required();
  value_flag(app, "--format", a.format, "onnx|torchscript|state_dict|safetensors",
             "the format (default: from --output's extension; a .pt file needs it)")
      ->check(one_of({"onnx", "torchscript", "state_dict", "safetensors"}));
  app.add_flag("--ema", a.ema, "export the checkpoint's EMA weights (train.ema_decay)");
  value_flag(app, "--input-size", a.input_size, "HxW", "the input's height and width (or one number for a square);\n"
             "default the recipe's test data through data.eval_transforms");
  value_flag(app, "--opset", a.opset, "N", "ONNX: the opset of ai.onnx (default 17)")->check(positive_whole_number());
  app.add_flag("--dynamic-batch", a.dynamic_batch, "ONNX: a symbolic batch dimension (default: batch 1)");
  app.add_flag("--include-normalize", a.include_normalize,
               "ONNX: the graph takes pixel / 255 in [0, 1] and applies data.mean / data.std itself");
  value_flag(app, "--dtype", a.dtype, "float32|float16", "ONNX: the weights' type (default float32; input and output\n"
             "stay float32)")->check(one_of({"float32", "float16"}));
  value_flag(app, "--config", a.config, "FILE", "the recipe of the model (default: the checkpoint's)");
  set_flag(app, a, "override one value of that config; repeatable");
}

void pack_flags(CLI::App& app, Args& a) {
  value_flag(app, "--from", a.pack_from, "DIR", "an ImageFolder (train/<class>/*.jpg, val/...) or an IDX folder\n"
             "(train-images-idx3-ubyte[.gz], t10k-...)")->required();
  value_flag(app, "--to", a.pack_to, "DIR", "the folder for the shards (created; must hold no .tar files)")->required();
  value_flag(app, "--max-side", a.max_side, "N", "scale images whose longer side is larger down to N pixels and\n"
             "store them as JPEG (default: keep the images as they are)")->check(positive_whole_number());
  value_flag(app, "--quality", a.quality, "Q", "JPEG quality of re-encoded images, 1..100 (default 90)")
      ->check(whole_number_in(1, 100));
  CLI::Option* size = value_flag(app, "--shard-size", a.shard_size_mb, "MB",
                                 "close a shard before it grows past this (default 256)")->check(CLI::PositiveNumber);
  value_flag(app, "--shards", a.pack_shards, "N", "cut each split into N shards of equal sample counts instead\n"
             "(for readers that hand whole shards to ranks or workers)")
      ->check(whole_number_in(1, 100000000))->excludes(size);
  value_flag(app, "--workers", a.pack_workers, "N", "threads reading and encoding samples (default: the hardware's\n"
             "threads); the shards are the same bytes whatever N")->check(whole_number_in(1, 4096));
}

// ---- the subcommand table ---------------------------------------------------------------------------
// One row per subcommand: its name, its line in `trainer --help`, the text of `trainer NAME --help`,
// the flags it takes and the handler that runs it. The first row is what runs when no subcommand is
// named (`trainer --config FILE` trains).

struct Subcommand {
  const char* name;
  const char* summary;
  const char* details;
  void (*flags)(CLI::App&, Args&);
  int (*handler)(const Args&);
};

const Subcommand kSubcommands[] = {
    {"train", "train the model a recipe describes (the default subcommand)",
     "Trains the model a YAML recipe describes, e.g. configs/fashion_mnist.yaml, into\n"
     "runs/<name>/<time>/. Ctrl-C or SIGTERM stops after the current step and saves\n"
     "checkpoints/last.pt (exit status 130); `trainer --resume RUN` continues from there.\n"
     "An inf/NaN loss stops the run with exit status 1 (train.on_nonfinite).",
     train_flags, stoker::apps::train},
    {"bench-data", "time the recipe's data pipeline alone",
     "Runs the recipe's data pipeline alone, without a model, and reports samples/s, the time\n"
     "of each stage and the CPU it used, as text and then one JSON line.",
     bench_data_flags, stoker::apps::bench_data},
    {"bench-step", "time the training step alone",
     "Times the training step alone (forward, backward, optimizer) on one batch already on the\n"
     "device, with the recipe's model and precision, as text and then one JSON line.",
     bench_step_flags, stoker::apps::bench_step},
    {"eval", "report a checkpoint's test loss, top-1 and top-5",
     "Reports a checkpoint's test loss, top-1 and top-5 on the recipe's test split (and those of\n"
     "its EMA weights, when it has them), as text and then one JSON line.",
     eval_flags, stoker::apps::eval},
    {"predict", "classify image files with a checkpoint",
     "Classifies JPEG/PNG files with a checkpoint, through the eval transforms of its saved\n"
     "config (or of --config), and prints `IMAGE: class (probability), ...` for the K likeliest.",
     predict_flags, stoker::apps::predict},
    {"doctor", "find where the accelerator starves, and what fixes it",
     "Runs the recipe's training step over a ladder of caches (device-cached, host-cached,\n"
     "decoded-cached, raw-cached, full), prints samples/s, the input wait and per-stage costs\n"
     "of each, then a diagnosis computed from them: input-bound or compute-bound, where, why,\n"
     "and the remedy with its predicted effect; one JSON line last. --tune searches the\n"
     "loader's settings, --batch the batch size, both by measurement. --save-to RUN_DIR keeps\n"
     "the ladder in that run directory (doctor.json) for `trainer report`. --check makes it a\n"
     "contract for CI: exit status 1 when the pipeline trains below --min-ratio of the ceiling.",
     doctor_flags, stoker::apps::doctor},
    {"report", "write an HTML report of a run (curves, config, environment)",
     "Writes one self-contained HTML page (inline SVG, no scripts, no network) of a run:\n"
     "training loss and learning rate by step, test top-1/top-5/loss by epoch (EMA too),\n"
     "samples/s, data wait, GPU idle, TFLOP/s, MFU and GPU telemetry over time, the input\n"
     "pipeline's time per stage, the doctor's ladder (doctor.json, from `trainer doctor\n"
     "--save-to RUN_DIR`), the resolved config and the environment. --compare overlays other runs.",
     report_flags, stoker::apps::report},
    {"export", "write a checkpoint's model for deployment: ONNX, TorchScript, a state dict or safetensors",
     "Writes a checkpoint's model (with --ema, its EMA weights) in one of four formats, taken\n"
     "from --output's extension (.onnx, .ts or .torchscript, .pth, .safetensors) or --format:\n"
     "  onnx         the eval-mode graph, batch norms folded into the convolutions, checked by\n"
     "               ONNX's checker: for ONNX Runtime, TensorRT, OpenVINO and other runtimes\n"
     "               (C++, Python, ...). Choose it to deploy outside PyTorch.\n"
     "  torchscript  the model traced in eval mode, float32: torch::jit::load in C++,\n"
     "               torch.jit.load in Python. Choose it to stay in libtorch.\n"
     "  state_dict   the weights in torch.save format (torchvision names for the torchvision-\n"
     "               layout ResNets): to fine-tune or load in Python. A .pt file may be either\n"
     "               of the last two, so it needs --format.\n"
     "  safetensors  the weights as .safetensors, in timm's names for a run from timm's weights\n"
     "               (a Hub folder or hf: entry), with a Hub config.json beside model.safetensors.\n"
     "Inputs are [N, C, H, W] float32, normalised as data.mean / data.std say (with\n"
     "--include-normalize an ONNX graph takes pixel / 255 and normalises itself). FILE.json\n"
     "beside the export holds the class names, mean, std, input size and channels (also in an\n"
     "ONNX file's metadata and a TorchScript file's extra file stoker.json). The input size\n"
     "comes from the recipe's test data, or from --input-size HxW, which needs no data.\n"
     "docs/trainer.md shows how to load each from C++ and Python.",
     export_flags, stoker::apps::export_weights},
    {"pack", "write a data set as WebDataset tar shards (optionally scaled down)",
     "Writes an ImageFolder or IDX data set as WebDataset shards in --to: train-000000.tar, ...\n"
     "and val-000000.tar, ... (ustar; members <key>.jpg|png and <key>.cls, in a seeded random\n"
     "order), each shard's index (.idx, DALI's wds2idx format) and _info.json (timm's layout).\n"
     "Each shard is written under a temporary name and renamed when complete. Train from them\n"
     "with data.type: webdataset (docs/shards.md).",
     pack_flags, stoker::apps::pack},
};

// ---- parsing: the table into CLI11, the default subcommand, usage errors as one sentence ----------

constexpr const char* kExitStatus =
    "exit status: 0 done, 1 error, 2 bad command line, 130 stopped by a signal (resume with --resume)";

// A bad command line (exit status 2): one sentence, and the help that shows what would be right.
struct UsageError : std::runtime_error {
  UsageError(const std::string& message, const std::string& subcommand)
      : std::runtime_error(message), help(subcommand.empty() ? "trainer --help" : "trainer " + subcommand + " --help") {}
  std::string help;
};

const Subcommand* find_subcommand(const std::string& name) {
  for (const Subcommand& s : kSubcommands) {
    if (name == s.name) return &s;
  }
  return nullptr;
}

std::string subcommand_names() {
  std::vector<std::string> names;
  for (const Subcommand& s : kSubcommands) names.push_back(s.name);
  return fmt::format("{}", fmt::join(names, ", "));
}

void declare(CLI::App& app, Args& args) {
  app.description(fmt::format(
      "trainer: trains image classifiers from YAML recipes and uses their checkpoints.\n"
      "With no subcommand it trains: `trainer --config FILE` is `trainer {} --config FILE`.",
      kSubcommands[0].name));
  app.footer(fmt::format("Run 'trainer SUBCOMMAND --help' for the flags each takes; 'trainer --version' says what this\n"
                         "build is (libtorch, CUDA parts and their GPU architectures, NCCL) and whether its kernels run\n"
                         "on this machine's GPU.\n\n{}",
                         kExitStatus));
  app.require_subcommand(1);
  for (const Subcommand& s : kSubcommands) {
    CLI::App* sub = app.add_subcommand(s.name, s.summary);
    sub->footer(fmt::format("{}\n\n{}", s.details, kExitStatus));
    sub->allow_extras();  // arguments it does not take are explained by extra_argument_error
    s.flags(*sub, args);
  }
}

// The words after the program name, with the default subcommand put first when none is named. A
// first word that is neither a flag nor a subcommand is an error.
std::vector<std::string> with_subcommand(int argc, char** argv) {
  std::vector<std::string> words(argv + 1, argv + argc);
  const bool help = !words.empty() && (words[0] == "-h" || words[0] == "--help");
  if (words.empty() || (words[0].rfind('-', 0) == 0 && !help)) {
    words.insert(words.begin(), kSubcommands[0].name);
  } else if (!help && find_subcommand(words[0]) == nullptr) {
    throw UsageError(fmt::format("unknown subcommand '{}'; the subcommands are: {}", words[0], subcommand_names()), "");
  }
  return words;
}

std::vector<std::string> flag_names(const CLI::App& sub) {
  std::vector<std::string> names;
  for (const CLI::Option* option : sub.get_options()) {
    std::string name = option->get_name(false, true);  // "-h,--help"
    std::replace(name.begin(), name.end(), ',', '/');
    if (!option->get_positional()) names.push_back(name);
  }
  return names;
}

// The first argument `sub` did not take, as a sentence: a flag of other subcommands names them, an
// unknown flag lists the flags `sub` takes. Nothing when `sub` took every argument.
std::optional<std::string> extra_argument_error(CLI::App& app, const CLI::App& sub) {
  const std::vector<std::string> extras = sub.remaining();
  if (extras.empty()) return std::nullopt;
  const std::string& arg = extras.front();
  if (arg.size() < 2 || arg[0] != '-') return fmt::format("unexpected argument '{}' for '{}'", arg, sub.get_name());
  const std::string flag = arg.substr(0, arg.find('='));
  std::vector<std::string> owners;
  for (const Subcommand& s : kSubcommands) {
    if (app.get_subcommand(s.name)->get_option_no_throw(flag) != nullptr) owners.push_back(s.name);
  }
  if (!owners.empty()) {
    return fmt::format("{} is not an option of '{}'; it belongs to: {}", flag, sub.get_name(), fmt::join(owners, ", "));
  }
  return fmt::format("unknown argument '{}'; '{}' takes: {}", arg, sub.get_name(), fmt::join(flag_names(sub), ", "));
}

// CLI11's message for `e`, as a sentence that starts with the subcommand or the flag:
// "eval needs --checkpoint FILE", "--config needs a value (FILE)", "--top takes a positive ...".
std::string usage_message(const CLI::ParseError& e, const CLI::App* sub) {
  const std::string what = e.what();
  if (sub == nullptr) return what;
  for (const CLI::Option* option : sub->get_options()) {
    const std::string name = option->get_name();
    if (dynamic_cast<const CLI::RequiredError*>(&e) != nullptr && option->get_required() && option->count() == 0) {
      if (option->get_positional()) return fmt::format("{} needs {}", sub->get_name(), option->get_description());
      return fmt::format("{} needs {} {}", sub->get_name(), name, option->get_type_name());
    }
    if (what.rfind(name + ": ", 0) != 0) continue;
    if (dynamic_cast<const CLI::ArgumentMismatch*>(&e) != nullptr) {
      return fmt::format("{} needs a value ({})", name, option->get_type_name());
    }
    if (dynamic_cast<const CLI::ValidationError*>(&e) != nullptr) return name + " " + what.substr(name.size() + 2);
  }
  return what;
}

// `--set train.epochs 3` (or `--set train.epochs`): a --set is one word with '='; the fix, spelt out.
std::optional<std::string> set_without_equals(const std::vector<std::string>& words) {
  for (size_t i = 0; i + 1 < words.size(); ++i) {
    if (words[i] != "--set" || words[i + 1].find('=') != std::string::npos) continue;
    const std::string& key = words[i + 1];
    const bool value_next = i + 2 < words.size() && words[i + 2].rfind("--", 0) != 0;
    return fmt::format("--set {}: a --set is key.path=value in one word, with '='; write --set {}={}", key, key,
                       value_next ? words[i + 2] : "VALUE");
  }
  return std::nullopt;
}

// Parses the command line into `args` and returns the subcommand to run; nothing after --help.
const Subcommand* parse_command_line(int argc, char** argv, Args& args) {
  if (argc == 2 && std::string(argv[1]) == "--version") {
    const stoker::BuildInfo build = stoker::build_info();
    std::fputs((stoker::build_info_text(build) + stoker::machine_text(build)).c_str(), stdout);
    return nullptr;
  }
  std::vector<std::string> words = with_subcommand(argc, argv);
  CLI::App app{"", "trainer"};
  declare(app, args);
  std::reverse(words.begin(), words.end());  // CLI11 takes the words last first
  std::optional<std::string> problem;
  try {
    app.parse(words);
  } catch (const CLI::CallForHelp&) {
    std::fputs(app.help().c_str(), stdout);  // the chosen subcommand's help, or the overall help
    return nullptr;
  } catch (const CLI::ParseError& e) {
    problem = usage_message(e, app.get_subcommands().empty() ? nullptr : app.get_subcommands().front());
  }
  if (app.get_subcommands().empty()) throw UsageError(problem.value_or("no subcommand"), "");
  const CLI::App& sub = *app.get_subcommands().front();
  // An argument the subcommand does not take explains the rest best (`train --steps 5` also lacks
  // --config), so it is reported first; but a --set written as two words explains that argument.
  if (std::optional<std::string> extra = extra_argument_error(app, sub)) problem = extra;
  if (std::optional<std::string> set = set_without_equals(with_subcommand(argc, argv))) problem = set;
  if (problem) throw UsageError(*problem, sub.get_name());
  return find_subcommand(sub.get_name());
}

}  // namespace

int main(int argc, char** argv) {
  try {
    Args args;
    const char* invoked_as = std::getenv("STOKER_INVOKED_AS");
    args.program = invoked_as != nullptr && *invoked_as != '\0' ? invoked_as : argv[0];
    const Subcommand* subcommand = parse_command_line(argc, argv, args);
    return subcommand == nullptr ? 0 : subcommand->handler(args);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "trainer: %s\nRun '%s' for usage.\n", e.what(), e.help.c_str());
    return 2;
  } catch (const stoker::StopRequested& e) {
    std::fprintf(stderr, "stopped: %s\n", e.what());
    return 130;  // as a shell reports a program ended by SIGINT
  } catch (const stoker::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    // The failed check's source location is for bug reports: the run's log file (debug level) has
    // it, the screen does not.
    stoker::logger().debug("error: {}{}", e.what(), e.location().empty() ? "" : " [" + e.location() + "]");
    return 1;
  } catch (const std::exception& e) {
    // libtorch (c10::Error) and the standard library: show the first line, which says what failed.
    std::string what = e.what();
    std::fprintf(stderr, "error: %s\n", what.substr(0, what.find('\n')).c_str());
    return 1;
  }
}
