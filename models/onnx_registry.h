// The process-wide registry of ONNX exporters (models/onnx_export.h), by module type, with every
// module type Stoker ships in it: its own (beside each module) and libtorch's (models/onnx_nn.h).
// Apart from onnx_export.h so that the modules, whose exporters use the OnnxExport context, do not
// include the list of all of them (as the models do not include the model registry).
//
//   // an application's own module type, once, before `trainer export --format onnx` or export_onnx:
//   stoker::models::register_onnx_exporter<MyBlockImpl>(
//       [](OnnxExport& e, const MyBlockImpl& m, const std::string& x) { return e.op("Relu", {x}); });
//   std::string bytes = export_onnx(model, options, stoker::models::onnx_exporter_registry());
#pragma once

#include <functional>
#include <string>
#include <utility>

#include "common/registry.h"
#include "models/onnx_export.h"

namespace stoker::models {

// Built on first use and never destroyed (common/registry.h: lazy_registry), like the model registry.
Registry<OnnxExporter>& onnx_exporter_registry();

// Registers `exporter` for modules of type `M` (the Impl class) in the process-wide registry; a
// second exporter for one type is refused.
template <typename M>
void register_onnx_exporter(std::function<std::string(OnnxExport&, const M&, const std::string&)> exporter) {
  add_onnx_exporter<M>(onnx_exporter_registry(), std::move(exporter));
}

}  // namespace stoker::models
