#include "worker/runtime/executor.h"

#include <algorithm>
#include <set>
#include <string>

#include "common/logging.h"
#include "worker/runtime/executor_guard.h"
#include "worker/runtime/layers/loss.h"
#include "worker/runtime/layers/memory_format.h"
#include "worker/runtime/layers/precision_scope.h"

namespace deepool::worker {
namespace {

// The rows [first, last) of the global batch out of a tensor that holds rows from `held_first`.
torch::Tensor Rows(const torch::Tensor& tensor, int64_t held_first, int64_t first, int64_t last) {
  return tensor.narrow(0, first - held_first, last - first);
}

bool SamePlacement(const planner::LayerPlacement& a, const planner::LayerPlacement& b) {
  return a.devices == b.devices && a.samples == b.samples;
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
  if (options.gradient_precision != planner::Precision::kFp32 &&
      options.gradient_precision != planner::Precision::kBf16) {
    return InvalidArgumentError(std::string("gradient precision ") +
                                planner::PrecisionName(options.gradient_precision) +
                                " is not supported (fp32 or bf16)");
  }
  if (options.accumulation_steps < 1) {
    return InvalidArgumentError("accumulation steps must be >= 1, not " +
                                std::to_string(options.accumulation_steps));
  }
  SetMathMode(options.precision, options.device);
  options.memory_format = planner::ResolveMemoryFormat(
      options.memory_format, options.device.is_cuda(), options.precision, graph);
  std::unique_ptr<Executor> executor(
      new Executor(graph, plan, comm, data, std::move(options), clock));
  RETURN_IF_ERROR(Guarded("building rank " + std::to_string(comm->rank()),
                          [&] { return executor->Init(factory); }));
  if (executor->options_.precision == planner::Precision::kFp16) {
    executor->loss_scaler_.emplace(executor->options_.loss_scaling);
  }
  // Init checked that the plan places every layer, which RankDataRange needs.
  executor->data_rows_ = RankDataRange(graph, plan, comm->rank());
  return executor;
}

StatusOr<std::unique_ptr<Executor>> Executor::CreateForEvaluation(const Executor& training,
                                                                  int64_t batch) {
  // On the heap, so that plan_ (a reference) stays valid when the executor owns it.
  auto plan = std::make_unique<const planner::Plan>(planner::ScalePlan(training.plan_, batch));
  std::unique_ptr<Executor> executor(new Executor(training.graph_, *plan, training.comm_,
                                                  /*data=*/nullptr, training.options_,
                                                  training.clock_));
  executor->owned_plan_ = std::move(plan);
  RETURN_IF_ERROR(executor->BuildLayout());
  // Every device of a layer holds samples in training (Plan::Validate), so the training executor
  // built every module that the scaled plan runs on this rank; the scaled plan may run fewer.
  for (int id = 0; id < training.graph_.num_layers(); ++id) {
    if (!executor->layers_[static_cast<size_t>(id)].runs) continue;
    auto module = training.modules_.find(id);
    if (module == training.modules_.end()) {
      return InternalError("evaluation at batch " + std::to_string(batch) + " runs " +
                           training.graph_.layer(id).name + " on rank " +
                           std::to_string(training.rank_) + ", which does not hold it");
    }
    executor->modules_[id] = module->second;
  }
  executor->data_rows_ =
      RankDataRange(training.graph_, *executor->owned_plan_, training.comm_->rank());
  return executor;
}

Status Executor::Init(const ModuleFactory& factory) {
  RETURN_IF_ERROR(BuildLayout());
  // One group per distinct device set with parameters, in one global order on every rank.
  std::set<RankGroup> groups;
  std::vector<torch::Tensor> all_params;
  for (int id = 0; id < graph_.num_layers(); ++id) {
    LayerState& state = layers_[static_cast<size_t>(id)];
    // Batch norm sums its statistics over its set, even without affine parameters.
    const bool sync_stats = graph_.layer(id).op == planner::Op::kBatchNorm2d &&
                            options_.sync_batch_norm && state.group.size() > 1;
    if (graph_.layer(id).params > 0 || sync_stats) groups.insert(state.group);
    if (!state.runs) continue;
    ASSIGN_OR_RETURN(auto module, factory(graph_, id, options_.seed));
    module->to(options_.device);
    ModuleToMemoryFormat(*module, options_.memory_format);
    module->train();
    if (sync_stats) module->set_group_sum(MakeGroupSum(id));
    for (auto& param : module->parameters()) {
      if (!param.requires_grad()) continue;
      state.params.push_back(param);
      all_params.push_back(param);
    }
    if (state.group.size() > 1) {
      state.hooked_grads.resize(state.params.size());
      for (size_t k = 0; k < state.params.size(); ++k) {
        state.params[k].register_hook(
            [this, id, k](const torch::Tensor& grad) { OnParamGradient(id, k, grad); });
      }
    }
    modules_[id] = std::move(module);
  }
  RETURN_IF_ERROR(comm_->CreateGroups(std::vector<RankGroup>(groups.begin(), groups.end())));
  ASSIGN_OR_RETURN(optimizer_, MakeOptimizer(options_.optimizer, std::move(all_params)));
  return Status::Ok();
}

Status Executor::BuildLayout() {
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
    if (id > 0 &&
        SamePlacement(*layers_[static_cast<size_t>(id - 1)].placement, *state.placement)) {
      segments_.back().last = id;
    } else {
      segments_.push_back(Segment{id, id});
    }
    state.segment = static_cast<int>(segments_.size()) - 1;
  }
  double evaluated_weight = -1;
  for (const auto& output : graph_.outputs()) {
    auto id = graph_.FindLayer(output.layer);
    if (!id) return InvalidArgumentError("graph output " + output.layer + " is not a layer");
    layers_[static_cast<size_t>(*id)].loss_weight += output.loss_weight;
    if (output.loss_weight > evaluated_weight) {  // the first of the heaviest
      evaluated_weight = output.loss_weight;
      evaluated_output_ = *id;
    }
  }
  RETURN_IF_ERROR(BuildEdges());
  BuildTransfers();
  return Status::Ok();
}

Status Executor::BuildEdges() {
  for (int id = 0; id < graph_.num_layers(); ++id) {
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
          edge.pieces =
              ResplitPieces(*producer.placement, *layers_[static_cast<size_t>(id)].placement);
          producer.output_edges.push_back(static_cast<int>(edges_.size()));
        }
      }
      layers_[static_cast<size_t>(id)].input_edges.push_back(static_cast<int>(edges_.size()));
      edges_.push_back(std::move(edge));
    }
  }
  return Status::Ok();
}

void Executor::BuildTransfers() {
  forward_transfers_.assign(layers_.size(), {});
  backward_transfers_.assign(segments_.size(), {});
  // Edge ids ascending, then pieces in order: the global order both sides of every pair list
  // their part of a group in.
  for (size_t e = 0; e < edges_.size(); ++e) {
    const Edge& edge = edges_[e];
    if (edge.producer == planner::kGraphInputId || edge.in_segment) continue;
    for (size_t p = 0; p < edge.pieces.size(); ++p) {
      const ResplitPiece& piece = edge.pieces[p];
      if (piece.src == piece.dst || (piece.src != rank_ && piece.dst != rank_)) continue;
      Transfer transfer{static_cast<int>(e), static_cast<int>(p), piece.src == rank_};
      forward_transfers_[static_cast<size_t>(edge.producer)].push_back(transfer);
      transfer.send = piece.dst == rank_;  // gradients go back from consumer to producer
      backward_transfers_[static_cast<size_t>(layers_[static_cast<size_t>(edge.consumer)].segment)]
          .push_back(transfer);
    }
  }
  forward_groups_.resize(layers_.size());
  backward_groups_.resize(segments_.size());
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
  return EmptyInMemoryFormat(
      sizes, torch::TensorOptions().dtype(ComputeDtype(options_.precision)).device(options_.device),
      options_.memory_format);
}

torch::Tensor Executor::ToTransferDtype(const torch::Tensor& tensor) const {
  const auto dtype = ComputeDtype(options_.precision);
  return tensor.scalar_type() == dtype ? tensor : tensor.to(dtype);
}

torch::Tensor Executor::RecvBuffer(int tag, const ResplitPiece& piece,
                                   const planner::Shape& shape) {
  // Reused every iteration: the previous iteration's tensors that alias it are released by the
  // time the same transfer is posted again (on CUDA, the receive is also ordered after the work
  // already queued on the current stream), and fresh pages would cost more than the copy.
  torch::Tensor& buffer = recv_buffers_[{tag, piece.src, piece.first}];
  if (!buffer.defined()) buffer = NewBuffer(piece.size(), shape);
  return buffer;
}

std::string Executor::SegmentName(int segment) const {
  const Segment& s = segments_[static_cast<size_t>(segment)];
  std::string name = graph_.layer(s.first).name;
  if (s.last != s.first) name += " .. " + graph_.layer(s.last).name;
  return name;
}

std::string Executor::LayersName(const std::vector<int>& layers) const {
  if (layers.empty()) return "no layers";
  std::string name = graph_.layer(layers.front()).name;
  if (layers.size() > 1) name += " + " + std::to_string(layers.size() - 1) + " more";
  return name;
}

template <typename Name>
Status Executor::WaitOne(CommWork& work, Name what) {
  SpanScope span(options_.spans, SpanKind::kWait, std::move(what));
  auto start = clock_->Now();
  Status status = work.Wait(comm_->timeout());
  idle_ += clock_->Now() - start;
  return status;
}

template <typename Name>
Status Executor::AwaitGroup(PendingGroup& group, Name what) {
  if (group.waited || !group.work) return Status::Ok();
  group.waited = true;
  return WaitOne(*group.work, std::move(what));
}

Status Executor::Forward(int id, const Batch& batch) {
  LayerState& state = layers_[static_cast<size_t>(id)];
  const planner::Layer& layer = graph_.layer(id);
  state.inputs.clear();
  std::vector<std::vector<torch::Tensor>> parts(state.input_edges.size());
  for (size_t k = 0; k < state.input_edges.size(); ++k) {
    const Edge& edge = edges_[static_cast<size_t>(state.input_edges[k])];
    if (edge.producer == planner::kGraphInputId) {
      parts[k].push_back(Rows(batch.inputs, batch.first, state.first, state.last));
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
        parts[k].push_back(
            ToTransferDtype(Rows(producer.output, producer.first, piece.first, piece.last)));
        continue;
      }
      // Posted at the producer's walk point; waited on only now, when the input is needed.
      RETURN_IF_ERROR(AwaitGroup(forward_groups_[static_cast<size_t>(edge.producer)], [&] {
                        return "inputs of " + layer.name;
                      }).WithContext("forward of " + layer.name));
      parts[k].push_back(RecvBuffer(ForwardTag(state.input_edges[k]), piece,
                                    graph_.layer(edge.producer).output_shape));
    }
  }
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
  SpanScope span(options_.spans, SpanKind::kForward, [&] { return layer.name; });
  // The sample's index in the iteration batch, so a dropout mask does not depend on the pass.
  module.set_step(StepContext{iteration_, pass_ * plan_.global_batch + state.first});
  {
    AutocastScope autocast(options_.precision, options_.device);
    state.output = module.Forward(state.inputs);
  }
  if (state.loss_weight > 0) {  // in fp32 whatever the precision
    state.loss = LossPart(ToFloatIfHalf(state.output), labels_[static_cast<size_t>(id)],
                          state.loss_weight, plan_.global_batch * options_.accumulation_steps);
  }
  return Status::Ok();
}

Status Executor::PostForwardTransfers(int id) {
  const auto& transfers = forward_transfers_[static_cast<size_t>(id)];
  if (transfers.empty()) return Status::Ok();
  SpanScope span(options_.spans, SpanKind::kTransfer,
                 [&] { return "output of " + graph_.layer(id).name; });
  const LayerState& producer = layers_[static_cast<size_t>(id)];
  torch::Tensor output = producer.output.defined() ? producer.output.detach() : torch::Tensor();
  std::vector<P2POp> ops;
  ops.reserve(transfers.size());
  for (const Transfer& transfer : transfers) {
    const ResplitPiece& piece =
        edges_[static_cast<size_t>(transfer.edge)].pieces[static_cast<size_t>(transfer.piece)];
    int tag = ForwardTag(transfer.edge);
    if (transfer.send) {
      // A narrow along the batch of a dense output is dense: no copy.
      ops.push_back(P2POp::Send(
          WireView(ToTransferDtype(Rows(output, producer.first, piece.first, piece.last)),
                   options_.memory_format),
          piece.dst, tag));
    } else {
      ops.push_back(P2POp::Recv(
          WireView(RecvBuffer(tag, piece, graph_.layer(id).output_shape), options_.memory_format),
          piece.src, tag));
    }
  }
  ASSIGN_OR_RETURN(forward_groups_[static_cast<size_t>(id)].work, comm_->Exchange(std::move(ops)));
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

void Executor::GatherOutputGradient(int id,
                                    std::vector<std::pair<torch::Tensor, int64_t>>& contributions) {
  const planner::Layer& layer = graph_.layer(id);
  const LayerState& state = layers_[static_cast<size_t>(id)];
  for (int edge_id : state.output_edges) {
    const Edge& edge = edges_[static_cast<size_t>(edge_id)];
    const LayerState& consumer = layers_[static_cast<size_t>(edge.consumer)];
    for (const ResplitPiece& piece : edge.pieces) {
      if (piece.src != rank_) continue;
      if (piece.dst != rank_) {
        contributions.emplace_back(RecvBuffer(BackwardTag(edge_id), piece, layer.output_shape),
                                   piece.first);
        continue;
      }
      const torch::Tensor& input = consumer.inputs[static_cast<size_t>(edge.input_index)];
      if (input.grad().defined()) {
        contributions.emplace_back(Rows(input.grad(), consumer.first, piece.first, piece.last),
                                   piece.first);
      }
    }
  }
}

Status Executor::Backward(int segment_index) {
  const Segment& segment = segments_[static_cast<size_t>(segment_index)];
  // The gradients of this segment's outputs from consumers on other ranks were posted at the
  // consumers' walk points.
  for (int id = segment.first; id <= segment.last; ++id) {
    for (int edge_id : layers_[static_cast<size_t>(id)].output_edges) {
      const Edge& edge = edges_[static_cast<size_t>(edge_id)];
      for (const ResplitPiece& piece : edge.pieces) {
        if (piece.src != rank_ || piece.dst == rank_) continue;
        int consumer_segment = layers_[static_cast<size_t>(edge.consumer)].segment;
        RETURN_IF_ERROR(AwaitGroup(backward_groups_[static_cast<size_t>(consumer_segment)], [&] {
                          return "output gradients of " + SegmentName(segment_index);
                        }).WithContext("backward of " + SegmentName(segment_index)));
      }
    }
  }
  // One autograd call from every root of the segment: outputs that consumers in other segments
  // gave a gradient, and loss parts. Gradients from inside the segment flow through autograd.
  std::vector<torch::Tensor> roots, root_grads;
  for (int id = segment.last; id >= segment.first; --id) {
    LayerState& state = layers_[static_cast<size_t>(id)];
    std::vector<std::pair<torch::Tensor, int64_t>> pieces;
    GatherOutputGradient(id, pieces);
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
      // Pieces arrive in the transfer dtype; autograd wants the output's own.
      root_grads.push_back(grad.to(state.output.scalar_type()));
    }
    if (state.loss.defined() && state.loss.requires_grad()) {
      roots.push_back(state.loss);
      // fp16: the scaled loss's gradient (LossScaler), so that small gradients stay normal.
      root_grads.push_back(loss_scaler_ ? torch::full_like(state.loss, loss_scaler_->scale())
                                        : torch::ones_like(state.loss));
    }
  }
  if (!roots.empty()) {
    SpanScope span(options_.spans, SpanKind::kBackward, [&] { return SegmentName(segment_index); });
    torch::autograd::backward(roots, root_grads);
  }
  for (int id = segment.first; id <= segment.last; ++id) {
    layers_[static_cast<size_t>(id)].output = torch::Tensor();
    layers_[static_cast<size_t>(id)].loss = torch::Tensor();
  }
  return Status::Ok();
}

torch::Tensor Executor::InputGradient(int id, int input_index) {
  const torch::Tensor& input =
      layers_[static_cast<size_t>(id)].inputs[static_cast<size_t>(input_index)];
  return input.grad().defined() ? input.grad() : torch::zeros_like(input);
}

Status Executor::PostBackwardTransfers(int segment) {
  const auto& transfers = backward_transfers_[static_cast<size_t>(segment)];
  if (transfers.empty()) return Status::Ok();
  SpanScope span(options_.spans, SpanKind::kTransfer,
                 [&] { return "input gradients of " + SegmentName(segment); });
  std::vector<P2POp> ops;
  ops.reserve(transfers.size());
  for (const Transfer& transfer : transfers) {
    const Edge& edge = edges_[static_cast<size_t>(transfer.edge)];
    const ResplitPiece& piece = edge.pieces[static_cast<size_t>(transfer.piece)];
    int tag = BackwardTag(transfer.edge);
    if (transfer.send) {
      const LayerState& consumer = layers_[static_cast<size_t>(edge.consumer)];
      torch::Tensor grad = InputGradient(edge.consumer, edge.input_index);
      ops.push_back(
          P2POp::Send(WireView(ToTransferDtype(Rows(grad, consumer.first, piece.first, piece.last)),
                               options_.memory_format),
                      piece.src, tag));
    } else {
      ops.push_back(
          P2POp::Recv(WireView(RecvBuffer(tag, piece, graph_.layer(edge.producer).output_shape),
                               options_.memory_format),
                      piece.dst, tag));
    }
  }
  ASSIGN_OR_RETURN(backward_groups_[static_cast<size_t>(segment)].work,
                   comm_->Exchange(std::move(ops)));
  return Status::Ok();
}

void Executor::OnParamGradient(int id, size_t param, const torch::Tensor& grad) {
  if (!SumsGradients()) return;  // autograd accumulates it in .grad for the last pass's sum
  LayerState& state = layers_[static_cast<size_t>(id)];
  if (state.in_bucket || state.hooked_grads[param].defined()) {
    if (bucket_error_.ok()) {
      bucket_error_ = InternalError("a parameter of " + graph_.layer(id).name +
                                    " received two gradients in one iteration");
    }
    return;
  }
  // The earlier passes' gradients (accumulation) are in .grad: the hook runs before autograd
  // adds this one to them.
  const torch::Tensor& earlier = state.params[param].grad();
  state.hooked_grads[param] = earlier.defined() ? grad + earlier : grad;
  if (++state.hooked < state.params.size()) return;
  Status added = AddToBucket(id);
  if (!added.ok() && bucket_error_.ok()) bucket_error_ = added;
}

Status Executor::AddToBucket(int id) {
  LayerState& state = layers_[static_cast<size_t>(id)];
  if (!SumsGradients()) return Status::Ok();  // an earlier pass: the gradients accumulate
  if (state.params.empty() || state.group.size() < 2 || state.in_bucket) return Status::Ok();
  state.in_bucket = true;
  GradientBucket& bucket = open_buckets_[state.group];
  bucket.layers.push_back(id);
  for (const auto& param : state.params) {
    bucket.bytes += param.numel() * static_cast<int64_t>(param.element_size());
  }
  const int64_t cap =
      started_bucket_groups_.count(state.group)
          ? options_.gradient_bucket_bytes
          : std::min(options_.gradient_bucket_bytes, planner::kFirstGradientBucketBytes);
  if (bucket.bytes >= cap) return StartBucketSum(state.group);
  return Status::Ok();
}

Status Executor::StartBucketSum(const RankGroup& group) {
  auto it = open_buckets_.find(group);
  if (it == open_buckets_.end()) return Status::Ok();
  PendingReduce pending;
  pending.layers = std::move(it->second.layers);
  // Named now: the bucket is erased and its layers move on before the span ends.
  const bool tracing = options_.spans && options_.spans->on();
  SpanScope span(options_.spans, SpanKind::kAllReduce,
                 tracing ? "gradients of " + LayersName(pending.layers) + " (" +
                               std::to_string(it->second.bytes >> 10) + " KiB)"
                         : std::string());
  open_buckets_.erase(it);
  started_bucket_groups_.insert(group);
  std::vector<torch::Tensor> grads;
  const bool carries_loss = iteration_loss_.defined() && !loss_reduce_ &&
                            group.size() == static_cast<size_t>(comm_->world_size());
  for (int id : pending.layers) {
    const LayerState& state = layers_[static_cast<size_t>(id)];
    for (size_t k = 0; k < state.params.size(); ++k) {
      const torch::Tensor& hooked = state.hooked_grads[k];
      const torch::Tensor& param = state.params[k];
      // A parameter autograd did not reach this iteration contributes zeros.
      torch::Tensor grad = hooked.defined()         ? hooked
                           : param.grad().defined() ? param.grad()
                                                    : torch::zeros_like(param);
      // In the parameter's memory order (a channels_last weight's NHWC order), so that a
      // channels_last gradient enters the bucket without a transpose.
      grads.push_back(FlattenInMemoryOrder(grad, options_.memory_format));
    }
  }
  // The rank's loss rides as one more element of the first world bucket (every rank of the world
  // starts the same buckets in the same order), so the loss sum costs no collective of its own.
  // Only in a float32/float64 bucket: a narrower one (bf16 gradient sums) would round the loss.
  const bool narrowed = options_.gradient_precision == planner::Precision::kBf16;
  const auto dtype = grads.front().scalar_type();
  if (carries_loss && !narrowed && (dtype == torch::kFloat || dtype == torch::kDouble)) {
    grads.push_back(iteration_loss_.to(dtype));
    loss_reduce_ = reduces_.size();
  }
  pending.flat = grads.size() == 1 ? grads[0].clone() : torch::cat(grads);
  if (narrowed) pending.flat = pending.flat.to(torch::kBFloat16);  // summed in bf16
  grads.clear();
  for (int id : pending.layers) {  // copied: autograd's tensors go back to the allocator
    for (auto& grad : layers_[static_cast<size_t>(id)].hooked_grads) grad = torch::Tensor();
  }
  ASSIGN_OR_RETURN(pending.work, comm_->AllReduceSum(pending.flat, group));
  reduces_.push_back(std::move(pending));
  return Status::Ok();
}

Status Executor::FlushGradientBuckets() {
  // Every rank of a device set has the same buckets (the same layers, in autograd's order for
  // the same graph), so any order derived from them is the same on all: by first layer, last
  // layers first.
  std::vector<std::pair<int, RankGroup>> open;
  for (const auto& [group, bucket] : open_buckets_) open.emplace_back(bucket.layers.front(), group);
  std::sort(open.begin(), open.end(),
            [](const auto& a, const auto& b) { return a.first > b.first; });
  for (const auto& entry : open) RETURN_IF_ERROR(StartBucketSum(entry.second));
  started_bucket_groups_.clear();
  return Status::Ok();
}

GroupSum Executor::MakeGroupSum(int id) {
  return [this, id](torch::Tensor& tensor) -> Status {
    Status status = [&]() -> Status {
      SpanScope span(options_.spans, SpanKind::kAllReduce,
                     [&] { return "batch norm statistics of " + graph_.layer(id).name; });
      ASSIGN_OR_RETURN(auto work,
                       comm_->AllReduceSum(tensor, layers_[static_cast<size_t>(id)].group));
      return WaitOne(*work, [&] { return "batch norm statistics of " + graph_.layer(id).name; });
    }();
    if (status.ok()) return status;
    status = status.WithContext("batch norm statistics of " + graph_.layer(id).name);
    if (layer_error_.ok()) layer_error_ = status;
    return status;
  };
}

Status Executor::FinishReductions(torch::Tensor& local_loss, std::unique_ptr<CommWork>& loss_sum) {
  for (size_t k = 0; k < reduces_.size(); ++k) {
    PendingReduce& pending = reduces_[k];
    RETURN_IF_ERROR(WaitOne(*pending.work, [&] {
                      return "gradients of " + LayersName(pending.layers);
                    }).WithContext("gradient sum of " + LayersName(pending.layers)));
    if (loss_reduce_ == k) {
      // Copied: the bucket may be float32, and it becomes the gradients.
      local_loss = pending.flat.narrow(0, pending.flat.numel() - 1, 1)
                       .to(torch::kFloat64, false,
                           /*copy=*/true);
      loss_sum = std::move(pending.work);  // its host wait comes after the step
    }
    // A bf16 sum comes back to the parameters' dtype (fp32: the master gradients).
    if (pending.flat.scalar_type() == torch::kBFloat16 &&
        options_.gradient_precision == planner::Precision::kBf16) {
      pending.flat = pending.flat.to(torch::kFloat);
    }
    // The gradients become views of the summed bucket, as DDP's gradient_as_bucket_view: no
    // copy back. They live until the next iteration drops them.
    int64_t offset = 0;
    for (int id : pending.layers) {
      for (auto& param : layers_[static_cast<size_t>(id)].params) {
        int64_t count = param.numel();
        param.mutable_grad() =
            UnflattenLike(pending.flat.narrow(0, offset, count), param, options_.memory_format);
        offset += count;
      }
    }
  }
  reduces_.clear();
  loss_reduce_.reset();
  return Status::Ok();
}

Status Executor::AwaitTransfers() {
  for (auto* groups : {&forward_groups_, &backward_groups_}) {
    for (PendingGroup& group : *groups) {
      RETURN_IF_ERROR(AwaitGroup(group, [] {
                        return std::string("sends to other ranks");
                      }).WithContext("sending activations and gradients"));
    }
  }
  return Status::Ok();
}

void Executor::SetLabels(const Batch& batch) {
  for (size_t id = 0; id < layers_.size(); ++id) {
    const LayerState& state = layers_[id];
    if (state.runs && state.loss_weight > 0) {
      labels_[id] = Rows(batch.labels, batch.first, state.first, state.last);
    }
  }
}

// The forward walk: every layer is a walk point on every rank (executor.h).
Status Executor::RunForward(const Batch& batch) {
  for (int id = 0; id < graph_.num_layers(); ++id) {
    if (layers_[static_cast<size_t>(id)].runs) RETURN_IF_ERROR(Forward(id, batch));
    RETURN_IF_ERROR(PostForwardTransfers(id).WithContext("transfers of " + graph_.layer(id).name));
  }
  return Status::Ok();
}

// The backward walk: every segment, in reverse, is a walk point on every rank; its input
// gradients go out before its gradient sums, in the same order everywhere.
Status Executor::RunBackward() {
  for (int s = static_cast<int>(segments_.size()) - 1; s >= 0; --s) {
    const Segment& segment = segments_[static_cast<size_t>(s)];
    bool runs = layers_[static_cast<size_t>(segment.first)].runs;
    if (runs) RETURN_IF_ERROR(Backward(s));
    RETURN_IF_ERROR(
        PostBackwardTransfers(s).WithContext("gradient transfers of " + SegmentName(s)));
    if (!runs) continue;
    RETURN_IF_ERROR(bucket_error_.WithContext("gradient sums of " + SegmentName(s)));
    for (int id = segment.last; id >= segment.first; --id) RETURN_IF_ERROR(AddToBucket(id));
  }
  return FlushGradientBuckets();
}

}  // namespace deepool::worker
