#include "worker/runtime/executor.h"

#include <algorithm>
#include <set>

#include "common/logging.h"
#include "worker/runtime/loss.h"

namespace deepool::worker {
namespace {

double Millis(Clock::Duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// The rows [first, last) of the global batch out of a tensor that holds rows from `held_first`.
torch::Tensor Rows(const torch::Tensor& tensor, int64_t held_first, int64_t first, int64_t last) {
  return tensor.narrow(0, first - held_first, last - first);
}

bool SamePlacement(const planner::LayerPlacement& a, const planner::LayerPlacement& b) {
  return a.devices == b.devices && a.samples == b.samples;
}

// libtorch reports errors as exceptions; the executor's callers get Status values.
template <typename Fn>
Status Guarded(const std::string& what, Fn&& fn) {
  try {
    return fn();
  } catch (const std::exception& e) {
    std::string message = e.what();
    if (auto newline = message.find('\n'); newline != std::string::npos) message.resize(newline);
    return InternalError(what + ": " + message);
  }
}

}  // namespace

StatusOr<std::unique_ptr<Executor>> Executor::Create(const planner::Graph& graph,
                                                     const planner::Plan& plan, Communicator* comm,
                                                     DataSource* data, const ModuleFactory& factory,
                                                     ExecutorOptions options, const Clock* clock) {
  if (plan.num_devices != comm->world_size()) {
    return InvalidArgumentError("plan is for " + std::to_string(plan.num_devices) +
                                " devices but the world has " + std::to_string(comm->world_size()) +
                                " ranks");
  }
  RETURN_IF_ERROR(plan.Validate().WithContext("plan"));
  std::unique_ptr<Executor> executor(
      new Executor(graph, plan, comm, data, std::move(options), clock));
  RETURN_IF_ERROR(Guarded("building rank " + std::to_string(comm->rank()),
                          [&] { return executor->Init(factory); }));
  return executor;
}

Status Executor::Init(const ModuleFactory& factory) {
  rank_ = comm_->rank();
  const int n = graph_.num_layers();
  layers_.resize(static_cast<size_t>(n));
  labels_.resize(static_cast<size_t>(n));
  for (int id = 0; id < n; ++id) {
    const planner::Layer& layer = graph_.layer(id);
    LayerState& state = layers_[static_cast<size_t>(id)];
    state.placement = plan_.Find(layer.name);
    if (!state.placement) return InvalidArgumentError("plan has no placement for " + layer.name);
    state.group = state.placement->devices;
    state.runs = state.placement->Runs(rank_);
    std::tie(state.first, state.last) = state.placement->SampleRange(rank_);
    if (state.runs && state.first >= state.last) state.runs = false;
    // Consecutive layers with the same placement share a segment. Ids are topological, so a
    // segment is convex: no layer outside it lies on a path between two of its layers.
    if (id > 0 && SamePlacement(*layers_[static_cast<size_t>(id - 1)].placement, *state.placement)) {
      segments_.back().last = id;
    } else {
      segments_.push_back(Segment{id, id});
    }
    state.segment = static_cast<int>(segments_.size()) - 1;
  }
  for (const auto& output : graph_.outputs()) {
    auto id = graph_.FindLayer(output.layer);
    if (!id) return InvalidArgumentError("graph output " + output.layer + " is not a layer");
    layers_[static_cast<size_t>(*id)].loss_weight += output.loss_weight;
  }
  for (int id = 0; id < n; ++id) {
    const planner::Layer& layer = graph_.layer(id);
    for (size_t k = 0; k < layer.input_ids.size(); ++k) {
      Edge edge;
      edge.producer = layer.input_ids[k];
      edge.consumer = id;
      edge.input_index = static_cast<int>(k);
      if (edge.producer != planner::kGraphInputId) {
        LayerState& producer = layers_[static_cast<size_t>(edge.producer)];
        edge.in_segment = producer.segment == layers_[static_cast<size_t>(id)].segment;
        // Output edges list only the edges whose gradients the executor moves itself.
        if (!edge.in_segment) {
          edge.pieces = ResplitPieces(*producer.placement,
                                      *layers_[static_cast<size_t>(id)].placement);
          producer.output_edges.push_back(static_cast<int>(edges_.size()));
        }
      }
      layers_[static_cast<size_t>(id)].input_edges.push_back(static_cast<int>(edges_.size()));
      edges_.push_back(std::move(edge));
    }
  }
  // One group per distinct device set with parameters, in one global order on every rank.
  std::set<RankGroup> groups;
  std::vector<torch::Tensor> all_params;
  for (int id = 0; id < n; ++id) {
    LayerState& state = layers_[static_cast<size_t>(id)];
    if (graph_.layer(id).params > 0) groups.insert(state.group);
    if (!state.runs) continue;
    ASSIGN_OR_RETURN(auto module, factory(graph_, id, options_.seed));
    module->to(options_.device);
    module->train();
    for (auto& param : module->parameters()) {
      if (!param.requires_grad()) continue;
      state.params.push_back(param);
      all_params.push_back(param);
    }
    modules_[id] = std::move(module);
  }
  RETURN_IF_ERROR(comm_->CreateGroups(std::vector<RankGroup>(groups.begin(), groups.end())));
  ASSIGN_OR_RETURN(optimizer_, MakeOptimizer(options_.optimizer, std::move(all_params)));
  return Status::Ok();
}

std::map<std::string, torch::Tensor> Executor::NamedParameters() const {
  std::map<std::string, torch::Tensor> named;
  for (const auto& [id, module] : modules_) {
    for (const auto& item : module->named_parameters()) {
      named[graph_.layer(id).name + "." + item.key()] = item.value();
    }
  }
  return named;
}

void Executor::Synchronize() {
  if (options_.synchronize) options_.synchronize();
}

torch::Tensor Executor::NewBuffer(int64_t rows, const planner::Shape& shape) {
  std::vector<int64_t> sizes{rows};
  sizes.insert(sizes.end(), shape.begin(), shape.end());
  return torch::empty(sizes, torch::TensorOptions().dtype(torch::kFloat32).device(options_.device));
}

torch::Tensor Executor::RecvBuffer(int tag, const ResplitPiece& piece,
                                   const planner::Shape& shape) {
  // Reused every iteration: the previous iteration's tensors that alias it are released by the
  // time the same transfer comes round again, and fresh pages would cost more than the copy.
  torch::Tensor& buffer = recv_buffers_[{tag, piece.src, piece.first}];
  if (!buffer.defined()) buffer = NewBuffer(piece.size(), shape);
  return buffer;
}

void Executor::ReleaseIterationTensors() {
  for (LayerState& state : layers_) {
    state.inputs.clear();
    state.output = torch::Tensor();
    state.loss = torch::Tensor();
  }
  for (torch::Tensor& labels : labels_) labels = torch::Tensor();
  sends_.clear();
  reduces_.clear();
}

Status Executor::WaitOne(CommWork& work) {
  Synchronize();
  auto start = clock_->Now();
  Status status = work.Wait(comm_->timeout());
  idle_ += clock_->Now() - start;
  return status;
}

Status Executor::WaitAndCount(std::vector<std::unique_ptr<CommWork>>& works) {
  for (auto& work : works) RETURN_IF_ERROR(WaitOne(*work));
  works.clear();
  return Status::Ok();
}

Status Executor::Forward(int id, const Batch& batch) {
  LayerState& state = layers_[static_cast<size_t>(id)];
  const planner::Layer& layer = graph_.layer(id);
  state.inputs.clear();
  std::vector<std::unique_ptr<CommWork>> recvs;
  std::vector<std::vector<torch::Tensor>> parts(state.input_edges.size());
  for (size_t k = 0; k < state.input_edges.size(); ++k) {
    const Edge& edge = edges_[static_cast<size_t>(state.input_edges[k])];
    if (edge.producer == planner::kGraphInputId) {
      parts[k].push_back(Rows(batch.inputs, 0, state.first, state.last));
      continue;
    }
    if (edge.in_segment) {  // same samples, same rank: the autograd graph goes on
      parts[k].push_back(layers_[static_cast<size_t>(edge.producer)].output);
      continue;
    }
    const LayerState& producer = layers_[static_cast<size_t>(edge.producer)];
    for (const ResplitPiece& piece : edge.pieces) {
      if (piece.dst != rank_) continue;
      if (piece.src == rank_) {
        parts[k].push_back(Rows(producer.output, producer.first, piece.first, piece.last));
      } else {
        auto buffer = RecvBuffer(ForwardTag(state.input_edges[k]), piece,
                                 graph_.layer(edge.producer).output_shape);
        ASSIGN_OR_RETURN(auto work,
                         comm_->Recv(buffer, piece.src, ForwardTag(state.input_edges[k])));
        recvs.push_back(std::move(work));
        parts[k].push_back(buffer);
      }
    }
  }
  RETURN_IF_ERROR(WaitAndCount(recvs).WithContext("forward of " + layer.name));
  for (size_t k = 0; k < parts.size(); ++k) {
    const Edge& edge = edges_[static_cast<size_t>(state.input_edges[k])];
    torch::Tensor input = parts[k].size() == 1 ? parts[k][0] : torch::cat(parts[k], 0);
    if (!edge.in_segment) {
      input = input.detach();
      if (edge.producer != planner::kGraphInputId) input.requires_grad_(true);
    }
    state.inputs.push_back(input);
  }
  LayerModule& module = *modules_.at(id);
  module.set_step(StepContext{iteration_, state.first});
  state.output = module.Forward(state.inputs);
  if (state.loss_weight > 0) {
    state.loss = LossPart(state.output, labels_[static_cast<size_t>(id)], state.loss_weight,
                          plan_.global_batch);
  }
  // Hand the consumers on other ranks their pieces right away (sends do not block).
  torch::Tensor output = state.output.detach();
  for (int edge_id : state.output_edges) {
    for (const ResplitPiece& piece : edges_[static_cast<size_t>(edge_id)].pieces) {
      if (piece.src != rank_ || piece.dst == rank_) continue;
      Synchronize();
      ASSIGN_OR_RETURN(auto work,
                       comm_->Send(Rows(output, state.first, piece.first, piece.last).contiguous(),
                                   piece.dst, ForwardTag(edge_id)));
      sends_.push_back(std::move(work));
    }
  }
  return Status::Ok();
}

void Executor::ReleaseForwardOnlyTensors() {
  for (LayerState& state : layers_) {
    if (!state.runs) continue;
    for (size_t k = 0; k < state.input_edges.size(); ++k) {
      const Edge& edge = edges_[static_cast<size_t>(state.input_edges[k])];
      if (edge.producer == planner::kGraphInputId || edge.in_segment) {
        state.inputs[k] = torch::Tensor();
      }
    }
    if (state.output_edges.empty()) state.output = torch::Tensor();
  }
}

Status Executor::GatherOutputGradient(
    int id, std::vector<std::unique_ptr<CommWork>>& recvs,
    std::vector<std::pair<torch::Tensor, int64_t>>& contributions) {
  const planner::Layer& layer = graph_.layer(id);
  const LayerState& state = layers_[static_cast<size_t>(id)];
  for (int edge_id : state.output_edges) {
    const Edge& edge = edges_[static_cast<size_t>(edge_id)];
    const LayerState& consumer = layers_[static_cast<size_t>(edge.consumer)];
    for (const ResplitPiece& piece : edge.pieces) {
      if (piece.src != rank_) continue;
      if (piece.dst == rank_) {
        const torch::Tensor& input = consumer.inputs[static_cast<size_t>(edge.input_index)];
        if (input.grad().defined()) {
          contributions.emplace_back(Rows(input.grad(), consumer.first, piece.first, piece.last),
                                     piece.first);
        }
      } else {
        auto buffer = RecvBuffer(BackwardTag(edge_id), piece, layer.output_shape);
        ASSIGN_OR_RETURN(auto work, comm_->Recv(buffer, piece.dst, BackwardTag(edge_id)));
        recvs.push_back(std::move(work));
        contributions.emplace_back(buffer, piece.first);
      }
    }
  }
  return Status::Ok();
}

Status Executor::Backward(const Segment& segment) {
  const size_t size = static_cast<size_t>(segment.last - segment.first + 1);
  // Per layer of the segment: gradient pieces of its output (tensor, first sample) from
  // consumers in other segments, local or received.
  std::vector<std::vector<std::pair<torch::Tensor, int64_t>>> contributions(size);
  std::vector<std::unique_ptr<CommWork>> recvs;
  for (int id = segment.first; id <= segment.last; ++id) {
    RETURN_IF_ERROR(
        GatherOutputGradient(id, recvs, contributions[static_cast<size_t>(id - segment.first)]));
  }
  Status received = WaitAndCount(recvs);
  if (!received.ok()) {
    std::string layers = graph_.layer(segment.first).name;
    if (segment.last != segment.first) layers += " .. " + graph_.layer(segment.last).name;
    return received.WithContext("backward of " + layers);
  }
  // One autograd call from every root of the segment: outputs that consumers in other segments
  // gave a gradient, and loss parts. Gradients from inside the segment flow through autograd.
  std::vector<torch::Tensor> roots, root_grads;
  for (int id = segment.last; id >= segment.first; --id) {
    LayerState& state = layers_[static_cast<size_t>(id)];
    auto& pieces = contributions[static_cast<size_t>(id - segment.first)];
    torch::Tensor grad;
    if (pieces.size() == 1 && pieces[0].second == state.first &&
        pieces[0].first.size(0) == state.last - state.first) {
      grad = pieces[0].first;  // the common case: one consumer, same layout
    } else if (!pieces.empty()) {
      grad = torch::zeros_like(state.output);
      for (auto& [piece, first] : pieces) {
        Rows(grad, state.first, first, first + piece.size(0)).add_(piece);
      }
    }
    if (grad.defined() && state.output.requires_grad()) {
      roots.push_back(state.output);
      root_grads.push_back(grad);
    }
    if (state.loss.defined() && state.loss.requires_grad()) {
      roots.push_back(state.loss);
      root_grads.push_back(torch::ones_like(state.loss));
    }
  }
  if (!roots.empty()) torch::autograd::backward(roots, root_grads);
  roots.clear();
  root_grads.clear();
  for (int id = segment.first; id <= segment.last; ++id) {
    layers_[static_cast<size_t>(id)].output = torch::Tensor();
    layers_[static_cast<size_t>(id)].loss = torch::Tensor();
  }
  for (int id = segment.last; id >= segment.first; --id) RETURN_IF_ERROR(SendInputGradients(id));
  for (int id = segment.last; id >= segment.first; --id) RETURN_IF_ERROR(ReduceGradients(id));
  return Status::Ok();
}

Status Executor::SendInputGradients(int id) {
  LayerState& state = layers_[static_cast<size_t>(id)];
  for (size_t k = 0; k < state.input_edges.size(); ++k) {
    int edge_id = state.input_edges[k];
    const Edge& edge = edges_[static_cast<size_t>(edge_id)];
    if (edge.producer == planner::kGraphInputId || edge.in_segment) continue;
    torch::Tensor input_grad;
    for (const ResplitPiece& piece : edge.pieces) {
      if (piece.dst != rank_ || piece.src == rank_) continue;
      if (!input_grad.defined()) {
        input_grad = state.inputs[k].grad();
        if (!input_grad.defined()) input_grad = torch::zeros_like(state.inputs[k]);
      }
      Synchronize();
      ASSIGN_OR_RETURN(
          auto work,
          comm_->Send(Rows(input_grad, state.first, piece.first, piece.last).contiguous(),
                      piece.src, BackwardTag(edge_id)));
      sends_.push_back(std::move(work));
    }
  }
  return Status::Ok();
}

Status Executor::ReduceGradients(int id) {
  LayerState& state = layers_[static_cast<size_t>(id)];
  if (state.params.empty() || state.group.size() < 2) return Status::Ok();
  std::vector<torch::Tensor> grads;
  for (auto& param : state.params) grads.push_back(param.grad().reshape({-1}));
  PendingReduce pending;
  pending.layer = id;
  pending.flat = torch::cat(grads);
  Synchronize();
  ASSIGN_OR_RETURN(pending.work, comm_->AllReduceSum(pending.flat, state.group));
  reduces_.push_back(std::move(pending));
  return Status::Ok();
}

Status Executor::FinishReductions() {
  for (PendingReduce& pending : reduces_) {
    RETURN_IF_ERROR(
        WaitOne(*pending.work).WithContext("gradient sum of " + graph_.layer(pending.layer).name));
    int64_t offset = 0;
    for (auto& param : layers_[static_cast<size_t>(pending.layer)].params) {
      int64_t count = param.numel();
      param.mutable_grad().copy_(pending.flat.narrow(0, offset, count).view_as(param));
      offset += count;
    }
  }
  reduces_.clear();
  return Status::Ok();
}

StatusOr<IterationStats> Executor::Step(int64_t iteration) {
  auto start = clock_->Now();
  iteration_ = iteration;
  idle_ = {};
  ReleaseIterationTensors();  // after a failed iteration
  ASSIGN_OR_RETURN(Batch batch, data_->GlobalBatch(iteration));
  double loss = 0;
  Status status = Guarded(
      "iteration " + std::to_string(iteration) + " on rank " + std::to_string(rank_),
      [&]() -> Status {
        batch.inputs = batch.inputs.to(options_.device);
        batch.labels = batch.labels.to(options_.device);
        const int n = graph_.num_layers();
        for (int id = 0; id < n; ++id) {
          LayerState& state = layers_[static_cast<size_t>(id)];
          if (!state.runs) continue;
          if (state.loss_weight > 0) {
            labels_[static_cast<size_t>(id)] = Rows(batch.labels, 0, state.first, state.last);
          }
          for (auto& param : state.params) {
            if (param.grad().defined()) {
              param.mutable_grad().detach_();
              param.mutable_grad().zero_();
            } else {
              param.mutable_grad() = torch::zeros_like(param);
            }
          }
        }
        for (int id = 0; id < n; ++id) {
          if (layers_[static_cast<size_t>(id)].runs) RETURN_IF_ERROR(Forward(id, batch));
        }
        ReleaseForwardOnlyTensors();
        torch::Tensor local_loss = torch::zeros({1}, torch::kFloat64);
        for (auto segment = segments_.rbegin(); segment != segments_.rend(); ++segment) {
          if (!layers_[static_cast<size_t>(segment->first)].runs) continue;
          for (int id = segment->last; id >= segment->first; --id) {
            const LayerState& state = layers_[static_cast<size_t>(id)];
            if (state.loss.defined())
              local_loss += state.loss.detach().to(torch::kCPU).to(torch::kFloat64);
          }
          RETURN_IF_ERROR(Backward(*segment));
        }
        RETURN_IF_ERROR(FinishReductions());
        RETURN_IF_ERROR(WaitAndCount(sends_).WithContext("sending activations and gradients"));
        if (optimizer_) optimizer_->step();
        // The global loss: each rank's parts, summed over the world (also ends the iteration in
        // step).
        if (comm_->world_size() > 1) {
          std::vector<int> world(static_cast<size_t>(comm_->world_size()));
          for (int r = 0; r < comm_->world_size(); ++r) world[static_cast<size_t>(r)] = r;
          ASSIGN_OR_RETURN(auto work, comm_->AllReduceSum(local_loss, world));
          RETURN_IF_ERROR(WaitOne(*work).WithContext("summing the loss"));
        }
        loss = local_loss.item<double>();
        Synchronize();
        return Status::Ok();
      });
  ReleaseIterationTensors();
  if (!status.ok()) return status;
  IterationStats stats;
  stats.iteration = iteration;
  stats.loss = loss;
  auto elapsed = clock_->Now() - start;
  stats.iteration_ms = Millis(elapsed);
  stats.idle_ms = Millis(idle_);
  stats.busy_ms = std::max(0.0, stats.iteration_ms - stats.idle_ms);
  stats.samples_per_s =
      stats.iteration_ms > 0 ? plan_.global_batch * 1000.0 / stats.iteration_ms : 0;
  return stats;
}

}  // namespace deepool::worker
