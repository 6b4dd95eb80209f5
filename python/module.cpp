// stoker._C: the binding under the Python package `stoker` (python/stoker/ holds the pure-Python rest).
// Thin by design: each function converts its arguments, calls the library (recipe/: SplitLoader,
// run_training, evaluate_checkpoint, export_checkpoint) with the GIL released wherever it may wait or
// run long, and converts the result. Tensors cross through torch's own caster (torch/csrc/utils/pybind.h:
// THPVariable_Wrap), without a copy. stoker::Error becomes FileNotFoundError (NotFoundError),
// ValueError (InvalidValueError) or RuntimeError, with the library's message.
#include <torch/csrc/utils/pybind.h>
#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "common/error_kinds.h"
#include "doctor/autotune.h"
#include "recipe/config.h"
#include "recipe/device.h"
#include "recipe/export.h"
#include "recipe/run.h"
#include "recipe/split_loader.h"
#include "recipe/tasks.h"
#include "trainer/callbacks.h"

namespace py = pybind11;

namespace stoker::python {
namespace {

void translate_errors(std::exception_ptr error) {
  try {
    if (error) std::rethrow_exception(error);
  } catch (const NotFoundError& e) {
    PyErr_SetString(PyExc_FileNotFoundError, e.what());
  } catch (const InvalidValueError& e) {
    PyErr_SetString(PyExc_ValueError, e.what());
  } catch (const Error& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  }
}

// ---- the loader's state as a Python dict -----------------------------------------------------------

constexpr const char* kStateFormat = "stoker.Loader/1";

py::dict state_to_dict(const LoaderState& s) {
  py::dict d;
  d["format"] = kStateFormat;
  d["split"] = s.split;
  d["epoch"] = s.epoch;
  d["batch"] = s.batch;
  d["world_size"] = s.world_size;
  d["batch_size"] = s.batch_size;
  d["accumulate_steps"] = s.accumulate_steps;
  d["data"] = s.data_yaml;
  return d;
}

template <typename T>
T state_field(const py::dict& d, const char* key, const char* expected) {
  if (!d.contains(key)) {
    throw InvalidValueError(fmt::format("the loader state has no '{}'; pass a dict that Loader.state_dict() returned",
                                        key));
  }
  try {
    return d[key].cast<T>();
  } catch (const py::cast_error&) {
    throw InvalidValueError(fmt::format("the loader state's '{}' is {}, expected {}", key,
                                        Py_TYPE(d[key].ptr())->tp_name, expected));
  }
}

LoaderState state_from_dict(const py::object& object) {
  if (!py::isinstance<py::dict>(object)) {
    throw InvalidValueError("the loader state must be a dict that Loader.state_dict() returned");
  }
  const py::dict d = py::reinterpret_borrow<py::dict>(object);
  if (state_field<std::string>(d, "format", "a string") != kStateFormat) {
    throw InvalidValueError(fmt::format("the loader state's format is '{}', expected '{}'",
                                        state_field<std::string>(d, "format", "a string"), kStateFormat));
  }
  LoaderState s;
  s.split = state_field<std::string>(d, "split", "a string");
  s.epoch = state_field<int64_t>(d, "epoch", "an integer");
  s.batch = state_field<int64_t>(d, "batch", "an integer");
  s.world_size = state_field<int64_t>(d, "world_size", "an integer");
  s.batch_size = state_field<int64_t>(d, "batch_size", "an integer");
  s.accumulate_steps = state_field<int64_t>(d, "accumulate_steps", "an integer");
  s.data_yaml = state_field<std::string>(d, "data", "a string");
  return s;
}

py::dict times_to_dict(const data::StageTimes& t) {
  py::dict d;
  d["read_s"] = t.read;
  d["decode_s"] = t.decode;
  d["transform_s"] = t.transform;
  d["wait_s"] = t.wait;
  d["copy_s"] = t.copy;
  d["batch_ops_s"] = t.batch_ops;
  d["samples"] = t.samples;
  d["batches"] = t.batches;
  d["bad_samples"] = t.bad_samples;
  d["read_bytes"] = t.read_bytes;
  d["read_opens"] = t.read_opens;
  return d;
}

// ---- the tasks ---------------------------------------------------------------------------------------

py::dict eval_to_dict(const EvalResult& r) {
  py::dict d;
  d["loss"] = r.loss;
  d["top1"] = r.top1;
  d["top5"] = r.top5;
  d["samples"] = r.samples;
  d["excluded"] = r.excluded;
  return d;
}

// A run as `trainer train` runs it (the doctor's autotune at start included). `stop_on_signal`:
// SIGINT/SIGTERM stop it at a step boundary (the caller restores its own handlers afterwards).
py::dict train(const Config& config, const std::string& resume, bool allow_config_change, bool stop_on_signal) {
  TrainRequest request;
  request.config = config;
  if (!resume.empty()) request.resume = resume;
  request.allow_config_change = allow_config_change;
  request.autotune = autotune_at_start;
  TrainOutcome out;
  {
    py::gil_scoped_release released;
    if (stop_on_signal) install_stop_signal_handlers();
    try {
      out = run_training(request);
    } catch (...) {
      reset_stop_signal();
      throw;
    }
    reset_stop_signal();
  }
  py::dict d;
  d["run_dir"] = out.run_dir.string();
  d["epochs"] = out.state.epoch;
  d["steps"] = out.state.step;
  d["interrupted"] = out.fit.interrupted;
  d["stopped_early"] = out.fit.stopped_early;
  d["seconds"] = out.fit.seconds;
  d["final_test"] = eval_to_dict(out.final_test);
  if (out.final_ema_test.samples > 0) d["final_ema_test"] = eval_to_dict(out.final_ema_test);
  if (out.state.best_epoch >= 0) {
    d["best_metric"] = out.state.best_metric;
    d["best_epoch"] = out.state.best_epoch;
  }
  return d;
}

py::dict evaluate(const std::string& checkpoint, const std::string& config_file,
                  const std::vector<std::string>& overrides) {
  CheckpointEvaluation result;
  {
    py::gil_scoped_release released;
    const std::filesystem::path resolved = resolve_checkpoint(checkpoint);
    const std::optional<std::filesystem::path> file =
        config_file.empty() ? std::nullopt : std::optional<std::filesystem::path>(config_file);
    result = evaluate_checkpoint(checkpoint_task_config(resolved, file, overrides), resolved);
  }
  py::dict d = eval_to_dict(result.model);
  if (result.ema) d["ema"] = eval_to_dict(*result.ema);
  d["epoch"] = result.state.epoch;
  d["step"] = result.state.step;
  return d;
}

py::dict export_model(const std::string& checkpoint, const std::string& output, const std::string& format,
                      const std::string& config_file, const std::vector<std::string>& overrides, bool use_ema) {
  ExportRequest request;
  request.checkpoint = checkpoint;
  request.output = output;
  request.format = format;
  if (!config_file.empty()) request.config_file = config_file;
  request.overrides = overrides;
  request.use_ema = use_ema;
  ExportResult result;
  {
    py::gil_scoped_release released;
    result = export_checkpoint(request);
  }
  py::dict d;
  d["format"] = export_format_name(result.format);
  d["model"] = result.model.string();
  d["metadata"] = result.metadata.string();
  d["summary"] = result.summary;
  return d;
}

// ---- the loader --------------------------------------------------------------------------------------

std::unique_ptr<SplitLoader> make_split_loader(const Config& config, const std::string& split, int64_t rank,
                                               int64_t world_size, const std::string& device, bool output_uint8) {
  SplitLoaderOptions o;
  o.split = split;
  o.rank = rank;
  o.world_size = world_size;
  o.device = resolve_device(device);
  o.output_uint8 = output_uint8;
  py::gil_scoped_release released;  // reading the data set's index (an IDX file, a folder's listing)
  return std::make_unique<SplitLoader>(config, o);
}

// (images, labels, digest) or None at the end of the epoch; waits without the GIL.
py::object next_batch(SplitLoader& loader) {
  std::optional<data::Batch> batch;
  {
    py::gil_scoped_release released;
    batch = loader.next();
  }
  if (!batch) return py::none();
  return py::make_tuple(batch->input, batch->target, batch->digest);
}

void bind_loader(py::module_& m) {
  py::class_<SplitLoader>(m, "SplitLoader")
      .def(py::init(&make_split_loader), py::arg("config"), py::arg("split"), py::arg("rank"), py::arg("world_size"),
           py::arg("device"), py::arg("output_uint8"))
      .def_property_readonly("num_batches", &SplitLoader::num_batches)
      .def_property_readonly("num_samples", &SplitLoader::num_samples)
      .def_property_readonly("batch_size", &SplitLoader::batch_size)
      .def_property_readonly("rank", &SplitLoader::rank)
      .def_property_readonly("world_size", &SplitLoader::world_size)
      .def_property_readonly("class_names", &SplitLoader::class_names)
      .def_property_readonly("closed", &SplitLoader::closed)
      .def_property_readonly("shape", [](const SplitLoader& l) {
        const data::InputShape s = l.shape();
        return py::make_tuple(s.channels, s.height, s.width);
      })
      .def("set_epoch", &SplitLoader::set_epoch)
      .def("begin", &SplitLoader::begin, py::call_guard<py::gil_scoped_release>())
      .def("next", &next_batch)
      .def("take_times", [](SplitLoader& l) { return times_to_dict(l.take_times()); })
      .def("state", [](const SplitLoader& l) { return state_to_dict(l.state()); })
      .def("load_state", [](SplitLoader& l, const py::object& d) { l.load_state(state_from_dict(d)); })
      .def("close", &SplitLoader::close, py::call_guard<py::gil_scoped_release>());
}

}  // namespace
}  // namespace stoker::python

PYBIND11_MODULE(_C, m) {
  using namespace stoker;
  m.doc() = "Stoker's C++ library (the binding under the stoker package; use stoker's own names)";
  py::register_exception_translator(&python::translate_errors);
  py::class_<Config>(m, "Config").def("to_yaml", [](const Config& c) { return config_to_yaml(c); });
  m.def("load_config", [](const std::string& path, const std::vector<std::string>& overrides) {
    return load_config(path, overrides);
  });
  m.def("parse_config", [](const std::string& text, const std::string& source,
                           const std::vector<std::string>& overrides) { return parse_config(text, source, overrides); });
  m.def("checkpoint_config", [](const std::string& checkpoint, const std::vector<std::string>& overrides) {
    return checkpoint_task_config(resolve_checkpoint(checkpoint), std::nullopt, overrides);
  });
  m.def("train", &python::train, py::arg("config"), py::arg("resume"), py::arg("allow_config_change"),
        py::arg("stop_on_signal"));
  m.def("evaluate", &python::evaluate);
  m.def("export", &python::export_model);
  m.attr("torch_version") = STOKER_TORCH_VERSION;
  python::bind_loader(m);
}
