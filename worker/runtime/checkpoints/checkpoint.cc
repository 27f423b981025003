#include "worker/runtime/checkpoints/checkpoint.h"

#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/export.h>
#include <torch/csrc/jit/serialization/pickler.h>
#include <torch/serialize.h>
#include <torch/torch.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <unordered_map>

#include "common/content_digest.h"
#include "common/durable_file.h"
#include "weights/state_dict_check.h"
#include "worker/runtime/checkpoints/torch_archive_loader.h"

namespace deepool::worker {
namespace {

// A CPU copy that owns exactly its own elements, so the archive holds no unrelated storage.
at::Tensor ForSaving(const at::Tensor& t) {
  at::Tensor cpu = t.detach().to(torch::kCPU).contiguous();
  if (cpu.storage_offset() != 0 ||
      cpu.storage().nbytes() != static_cast<size_t>(cpu.numel()) * cpu.element_size()) {
    cpu = cpu.clone();
  }
  return cpu;
}

// The archive torch.save writes for a plain dict, without TorchScript's type tags on the dict
// (torch::pickle_save adds them): Python's torch.load reads it with weights_only=True, its
// default since PyTorch 2.6, which refuses the tags' restore function.
std::vector<char> PickleUntagged(const c10::IValue& value) {
  std::vector<char> pickled;
  torch::jit::Pickler pickler(
      [&](const char* data, size_t size) { pickled.insert(pickled.end(), data, data + size); },
      /*tensor_table=*/nullptr, /*type_renamer=*/nullptr, /*memoized_class_types=*/nullptr,
      /*get_tensor_id=*/nullptr, /*tag_aggregates=*/false);
  pickler.protocol();
  pickler.pushIValue(value);
  pickler.stop();
  std::vector<char> archive;
  size_t tensor_bytes = 0;
  for (const at::Tensor& t : pickler.tensorData()) tensor_bytes += t.nbytes();
  archive.reserve(tensor_bytes + pickled.size() + (1 << 20));  // no regrowth for large models
  caffe2::serialize::PyTorchStreamWriter writer([&](const void* data, size_t size) {
    const char* bytes = static_cast<const char*>(data);
    archive.insert(archive.end(), bytes, bytes + size);
    return size;
  });
  torch::jit::writeArchiveAndTensors("data", pickled.data(), pickled.size(), pickler.tensorData(),
                                     writer);
  writer.writeEndOfFile();
  return archive;
}

// A tied parameter's tensor (planner/tied_parameters.h) is its source's when this process holds
// the source too: the copies are equal, and one tensor under both keys is written once, as
// torch.save writes a tied state_dict.
at::Tensor TiedOrOwn(const planner::Graph& graph,
                     const std::vector<std::shared_ptr<LayerModule>>& modules, int id,
                     const std::string& name, const at::Tensor& own) {
  for (const planner::TiedParameter& tie : graph.layer(id).tied) {
    const auto& source = modules[static_cast<size_t>(tie.source_layer)];
    if (tie.parameter != name || source == nullptr) continue;
    const auto params = source->named_parameters(/*recurse=*/true);
    if (const at::Tensor* tensor = params.find(tie.source_parameter)) return *tensor;
  }
  return own;
}

}  // namespace

StatusOr<StateDict> CollectStateDict(const planner::Graph& graph,
                                     const std::vector<std::shared_ptr<LayerModule>>& modules) {
  if (modules.size() != static_cast<size_t>(graph.num_layers())) {
    return InvalidArgumentError("CollectStateDict: " + std::to_string(modules.size()) +
                                " modules for " + std::to_string(graph.num_layers()) + " layers");
  }
  StateDict state;
  for (int id = 0; id < graph.num_layers(); ++id) {
    const auto& module = modules[static_cast<size_t>(id)];
    if (module == nullptr) continue;
    const std::string& layer = graph.layer(id).name;
    for (const auto& p : module->named_parameters(/*recurse=*/true)) {
      state.emplace_back(StateKey(layer, p.key()),
                         TiedOrOwn(graph, modules, id, p.key(), p.value()));
    }
    for (const auto& b : module->named_buffers(/*recurse=*/true)) {
      state.emplace_back(StateKey(layer, b.key()), b.value());
    }
  }
  return state;
}

Status LoadStateDictInto(const StateDict& state, const planner::Graph& graph,
                         const std::vector<std::shared_ptr<LayerModule>>& modules) {
  if (modules.size() != static_cast<size_t>(graph.num_layers())) {
    return InvalidArgumentError("LoadStateDictInto: " + std::to_string(modules.size()) +
                                " modules for " + std::to_string(graph.num_layers()) + " layers");
  }
  // The coordinator's check at submission, on the tensors' shapes (weights/state_dict_check.h).
  weights::WeightsIndex index;
  std::unordered_map<std::string, const at::Tensor*> by_key;
  for (const auto& [key, tensor] : state) {
    if (!tensor.defined())
      return InvalidArgumentError("checkpoint tensor '" + key + "' is undefined");
    index.push_back({key, "", tensor.sizes().vec()});
    by_key[key] = &tensor;
  }
  std::vector<bool> held;
  for (const auto& module : modules) held.push_back(module != nullptr);
  RETURN_IF_ERROR(weights::CheckStateDict(index, graph, &held));

  torch::NoGradGuard no_grad;
  for (int id = 0; id < graph.num_layers(); ++id) {
    const auto& module = modules[static_cast<size_t>(id)];
    if (module == nullptr) continue;
    const std::string& layer = graph.layer(id).name;
    auto load = [&](const std::string& name, at::Tensor& target) -> Status {
      const std::string key = StateKey(layer, name);
      auto it = by_key.find(key);
      // The check above found every tensor with its shape, as the modules registered them
      // (tests/runtime/state_dict_shapes_test.cc); this guards a module that disagrees.
      if (it == by_key.end() || it->second->sizes() != target.sizes()) {
        return InternalError("layer module '" + layer + "' holds '" + name +
                             "', not as planner::LayerStateShapes lists it");
      }
      try {
        target.copy_(*it->second);
      } catch (const std::exception& e) {
        return InternalError("copying checkpoint tensor '" + key + "': " + e.what());
      }
      return Status::Ok();
    };
    for (auto& p : module->named_parameters(/*recurse=*/true)) {
      RETURN_IF_ERROR(load(p.key(), p.value()));
    }
    for (auto& b : module->named_buffers(/*recurse=*/true)) {
      RETURN_IF_ERROR(load(b.key(), b.value()));
    }
  }
  return Status::Ok();
}

Status SaveCheckpoint(const std::string& path, const StateDict& state, int64_t* bytes_out,
                      uint64_t* digest_out) {
  std::vector<char> bytes;
  try {
    c10::impl::GenericDict dict(c10::StringType::get(), c10::TensorType::get());
    // One tensor under two keys (a tied parameter) is copied once, so the archive stores it once.
    std::map<std::pair<const void*, std::vector<int64_t>>, at::Tensor> saved;
    for (const auto& [key, tensor] : state) {
      if (!tensor.defined())
        return InvalidArgumentError("checkpoint tensor '" + key + "' is undefined");
      if (dict.contains(key)) return InvalidArgumentError("duplicate checkpoint key '" + key + "'");
      auto [it, fresh] = saved.try_emplace({tensor.data_ptr(), tensor.sizes().vec()});
      if (fresh) it->second = ForSaving(tensor);
      dict.insert(key, it->second);
    }
    bytes = PickleUntagged(c10::IValue(dict));
  } catch (const std::exception& e) {
    return InternalError(std::string("serialising checkpoint: ") + e.what());
  }
  // On the disk before the manifest that lists it is written (a power loss must not leave a
  // manifest over a file that never reached the disk, once older checkpoints are pruned).
  RETURN_IF_ERROR(ReplaceFileDurably(path, std::string_view(bytes.data(), bytes.size())));
  if (bytes_out) *bytes_out = static_cast<int64_t>(bytes.size());
  if (digest_out) {
    ContentDigest digest;
    digest.Update(bytes.data(), bytes.size());
    *digest_out = digest.Finish();
  }
  return Status::Ok();
}

StatusOr<StateDict> LoadCheckpoint(const std::string& path) { return LoadTorchArchive(path); }

}  // namespace deepool::worker
