// `deepool model list` and `deepool model show NAME`: the model zoo from the command line.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/command_registry.h"
#include "cli/command_support.h"
#include "common/byte_size.h"
#include "planner/graph.h"
#include "planner/zoo/zoo.h"

namespace deepool::cli {
namespace {

namespace zoo = planner::zoo;

struct ShowFlags {
  std::string name;
  bool json = false;
  zoo::ModelOptions options;  // the zoo's defaults
  bool no_aux_logits = false;
};

// 138357544 -> "138,357,544".
std::string GroupDigits(int64_t value) {
  std::string digits = std::to_string(value < 0 ? -value : value);
  std::string grouped;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) grouped += ',';
    grouped += digits[i];
  }
  return value < 0 ? "-" + grouped : grouped;
}

// 15470264320 -> "15.47G"; values below 1000 print as they are.
std::string ShortCount(double value) {
  static const char* const kSuffixes[] = {"", "K", "M", "G", "T", "P"};
  int index = 0;
  while (value >= 1000.0 && index < 5) {
    value /= 1000.0;
    ++index;
  }
  char buffer[32];
  if (index == 0) {
    std::snprintf(buffer, sizeof(buffer), "%.0f", value);
  } else {
    std::snprintf(buffer, sizeof(buffer), "%.2f%s", value, kSuffixes[index]);
  }
  return buffer;
}

int ExitCodeFor(const Status& status) {
  switch (status.code()) {
    case StatusCode::kNotFound:
      return kExitNotFound;
    case StatusCode::kInvalidArgument:
      return kExitUsage;
    default:
      return kExitFailure;
  }
}

int RunList() {
  std::vector<std::vector<std::string>> rows = {{"NAME", "PARAMS", "DESCRIPTION"}};
  for (const std::string& name : zoo::ModelNames()) {
    StatusOr<planner::Graph> graph = zoo::BuildModel(name);
    if (!graph.ok()) {
      std::cerr << "error: " << name << ": " << graph.status().message() << '\n';
      return kExitFailure;
    }
    rows.push_back({name, GroupDigits(graph->total_params()), zoo::ModelDescription(name)});
  }
  PrintTable(rows, {false, true, false}, std::cout);
  return kExitOk;
}

void PrintGraphTable(const planner::Graph& graph, std::ostream& out) {
  int64_t activation_bytes = 0;
  std::vector<std::vector<std::string>> rows = {
      {"#", "LAYER", "OP", "INPUTS", "OUTPUT SHAPE", "PARAMS", "FLOPS/SAMPLE"}};
  for (int id = 0; id < graph.num_layers(); ++id) {
    const planner::Layer& layer = graph.layer(id);
    activation_bytes += layer.output_bytes;
    std::string inputs;
    for (const std::string& input : layer.inputs) inputs += (inputs.empty() ? "" : ",") + input;
    rows.push_back({std::to_string(id), layer.name, planner::OpName(layer.op), inputs,
                    planner::ShapeToString(layer.output_shape), GroupDigits(layer.params),
                    ShortCount(static_cast<double>(layer.forward_flops))});
  }
  out << "model: " << graph.name() << "\n";
  out << "input shape: " << planner::ShapeToString(graph.input_shape()) << " (per sample)\n";
  out << "outputs:";
  for (const planner::GraphOutput& output : graph.outputs()) {
    out << ' ' << output.layer << " (loss weight " << output.loss_weight << ")";
  }
  out << "\n\n";
  PrintTable(rows, {true, false, false, false, false, true, true}, out);
  out << "\nlayers: " << graph.num_layers() << "\n";
  out << "parameters: " << GroupDigits(graph.total_params()) << " ("
      << FormatBytes(graph.total_params() * 4, ByteUnit::kMiB, 2) << " as fp32)\n";
  char gflops[32];
  std::snprintf(gflops, sizeof(gflops), "%.4g",
                static_cast<double>(graph.total_forward_flops()) / 1e9);
  out << "forward GFLOPs per sample: " << gflops << "\n";
  out << "activation bytes per sample (sum of layer outputs, fp32): "
      << GroupDigits(activation_bytes) << " (" << FormatBytes(activation_bytes, ByteUnit::kMiB, 2)
      << ")\n";
}

int RunShow(const ShowFlags& flags) {
  zoo::ModelOptions options = flags.options;
  options.aux_logits = !flags.no_aux_logits;
  StatusOr<planner::Graph> graph = zoo::BuildModel(flags.name, options);
  if (!graph.ok()) {
    std::cerr << "error: " << graph.status().message() << '\n';
    return ExitCodeFor(graph.status());
  }
  if (flags.json) {
    nlohmann::ordered_json doc = nlohmann::ordered_json::parse(planner::GraphToJson(*graph));
    doc["total_params"] = graph->total_params();
    doc["total_forward_flops"] = graph->total_forward_flops();
    std::cout << doc.dump(2) << '\n';
  } else {
    PrintGraphTable(*graph, std::cout);
  }
  return kExitOk;
}

void RegisterModelCommands(CLI::App& app, CommandResult& result) {
  CLI::App* model = app.add_subcommand(
      "model", "Inspect the model zoo: torchvision architectures and tiny test models");
  model->require_subcommand(1);
  std::string names;
  for (const std::string& name : zoo::ModelNames()) names += (names.empty() ? "" : ", ") + name;
  model->footer("Models: " + names);

  CLI::App* list = model->add_subcommand(
      "list", "List the zoo's models with their parameter counts at default options");
  list->callback([&result] { result.exit_code = RunList(); });

  auto flags = std::make_shared<ShowFlags>();
  CLI::App* show = model->add_subcommand(
      "show",
      "Show a model's layers (name, op, inputs, output shape, parameters, FLOPs) and totals");
  show->add_option("name", flags->name, "Model name (see `deepool model list`)")->required();
  show->add_flag("--json", flags->json,
                 "Print the layer graph as a deepool.graph JSON document (docs/formats.md) with "
                 "added top-level total_params and total_forward_flops");
  show->add_option("--num-classes", flags->options.num_classes, "Number of output classes")
      ->capture_default_str();
  show->add_option("--image-size", flags->options.image_size,
                   "Input image height and width (0: model default, 224; 299 for inception_v3; "
                   "16 for small_cnn); for mlp, the number of input features (default 32)");
  show->add_flag("--no-aux-logits", flags->no_aux_logits,
                 "For inception_v3: leave out the auxiliary classifier");
  show->footer(
      "Examples:\n"
      "  deepool model show resnet50\n"
      "  deepool model show inception_v3 --no-aux-logits --num-classes 10\n"
      "  deepool model show small_cnn --json > small_cnn.graph.json");
  show->callback([&result, flags] { result.exit_code = RunShow(*flags); });
}

const RegisterCommand kRegisterModelCommands(RegisterModelCommands);

}  // namespace
}  // namespace deepool::cli
