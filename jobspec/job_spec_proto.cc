#include "jobspec/job_spec_proto.h"

#include <google/protobuf/unknown_field_set.h>

#include <vector>

#include "common/utf8.h"

namespace deepool::jobspec {
namespace {

// Fields a newer (or hostile) client set that this coordinator does not know would be dropped
// without a word, and could pad a message: they are refused, naming the field number.
Status CheckNoUnknownFields(const google::protobuf::Message& message, const std::string& path) {
  const google::protobuf::Reflection* reflection = message.GetReflection();
  const google::protobuf::UnknownFieldSet& unknown = reflection->GetUnknownFields(message);
  if (!unknown.empty()) {
    return InvalidArgumentError("unknown field " + path + "#" +
                                std::to_string(unknown.field(0).number()) +
                                " (a newer client than this coordinator?)");
  }
  std::vector<const google::protobuf::FieldDescriptor*> fields;
  reflection->ListFields(message, &fields);
  for (const google::protobuf::FieldDescriptor* field : fields) {
    if (field->cpp_type() != google::protobuf::FieldDescriptor::CPPTYPE_MESSAGE) continue;
    if (field->is_repeated()) {
      for (int i = 0; i < reflection->FieldSize(message, field); ++i) {
        RETURN_IF_ERROR(CheckNoUnknownFields(reflection->GetRepeatedMessage(message, field, i),
                                             path + field->name() + "."));
      }
    } else {
      RETURN_IF_ERROR(
          CheckNoUnknownFields(reflection->GetMessage(message, field), path + field->name() + "."));
    }
  }
  return Status::Ok();
}

// Unset fields keep DataSpec's defaults.
DataSpec DataFromProto(const v1::DataSpec& p) {
  DataSpec data;
  if (!p.kind().empty()) data.kind = p.kind();
  if (p.has_seed()) data.seed = p.seed();
  data.path = p.path();
  if (p.has_skip_bad()) data.skip_bad = p.skip_bad();
  if (p.has_dtype()) data.dtype = p.dtype();
  return data;
}

void DataToProto(const DataSpec& data, v1::DataSpec* p) {
  p->set_kind(data.kind);
  p->set_seed(data.seed);
  p->set_path(data.path);
  if (data.skip_bad != 0) p->set_skip_bad(data.skip_bad);
  if (data.kind == "tokens") p->set_dtype(data.dtype);
}

}  // namespace

Status CheckStringsAreUtf8(const google::protobuf::Message& message, const std::string& path) {
  using google::protobuf::FieldDescriptor;
  const google::protobuf::Reflection* reflection = message.GetReflection();
  std::vector<const FieldDescriptor*> fields;
  reflection->ListFields(message, &fields);
  for (const FieldDescriptor* field : fields) {
    const std::string name = path + field->name();
    const int count = field->is_repeated() ? reflection->FieldSize(message, field) : 1;
    for (int i = 0; i < count; ++i) {
      const std::string where = field->is_repeated() ? name + "[" + std::to_string(i) + "]" : name;
      if (field->type() == FieldDescriptor::TYPE_STRING) {
        std::string scratch;
        const std::string& text =
            field->is_repeated()
                ? reflection->GetRepeatedStringReference(message, field, i, &scratch)
                : reflection->GetStringReference(message, field, &scratch);
        if (!IsValidUtf8(text)) return InvalidArgumentError(where + ": is not valid UTF-8");
      } else if (field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
        RETURN_IF_ERROR(CheckStringsAreUtf8(field->is_repeated()
                                                ? reflection->GetRepeatedMessage(message, field, i)
                                                : reflection->GetMessage(message, field),
                                            where + "."));
      }
    }
  }
  return Status::Ok();
}

StatusOr<JobSpec> JobSpecFromProto(const v1::JobSpec& p) {
  RETURN_IF_ERROR(CheckNoUnknownFields(p, ""));
  RETURN_IF_ERROR(CheckStringsAreUtf8(p, ""));
  JobSpec spec;
  spec.name = p.name();
  spec.model = p.model();
  spec.graph_json = p.graph_json();
  switch (p.role()) {
    case v1::JOB_ROLE_UNSPECIFIED:  // not given
    case v1::JOB_ROLE_FG:
      spec.role = JobRole::kFg;
      break;
    case v1::JOB_ROLE_BG:
      spec.role = JobRole::kBg;
      break;
    default:
      return InvalidArgumentError("role: unknown role " + std::to_string(p.role()) +
                                  "; must be JOB_ROLE_FG or JOB_ROLE_BG");
  }
  if (p.has_priority()) spec.priority = p.priority();
  if (!p.has_global_batch()) return InvalidArgumentError("global_batch: is required");
  spec.global_batch = p.global_batch();
  if (p.has_gpus()) spec.gpus = p.gpus();
  if (p.has_amplification_limit()) spec.amplification_limit = p.amplification_limit();
  // Neither, or both: ValidateJobSpec names the two.
  if (p.has_iterations()) spec.iterations = p.iterations();
  if (p.has_epochs()) spec.epochs = p.epochs();
  if (p.has_init()) {
    if (p.init().path().empty()) return InvalidArgumentError("init.path: is required");
    spec.init_path = p.init().path();
  }
  if (!p.precision().empty()) {
    StatusOr<planner::Precision> precision = planner::ParsePrecision(p.precision());
    if (!precision.ok()) return precision.status().WithContext("precision");
    spec.precision = *precision;
  }
  if (p.has_accumulation_steps()) spec.accumulation_steps = p.accumulation_steps();
  if (!p.gradient_precision().empty()) {
    StatusOr<planner::Precision> precision = planner::ParsePrecision(p.gradient_precision());
    if (!precision.ok()) return precision.status().WithContext("gradient_precision");
    spec.gradient_precision = *precision;  // ValidateJobSpec: fp32 or bf16
  }
  if (!p.memory_format().empty()) {
    StatusOr<planner::MemoryFormat> format = planner::ParseMemoryFormat(p.memory_format());
    if (!format.ok()) return format.status().WithContext("memory_format");
    spec.memory_format = *format;
  }
  if (p.has_optimizer()) {
    const v1::OptimizerSpec& o = p.optimizer();
    if (!o.name().empty()) spec.optimizer.name = o.name();
    if (spec.optimizer.name == "adam" || spec.optimizer.name == "adamw") {
      spec.optimizer.momentum = 0;
    }
    if (spec.optimizer.name == "adamw") {
      spec.optimizer.weight_decay = protocol::kAdamWDefaultWeightDecay;
    }
    if (o.has_lr()) spec.optimizer.lr = o.lr();
    if (o.has_momentum()) spec.optimizer.momentum = o.momentum();
    if (o.has_weight_decay()) spec.optimizer.weight_decay = o.weight_decay();
    if (o.has_eps()) spec.optimizer.eps = o.eps();
    if (o.betas_size() != 0) {
      if (o.betas_size() != 2) return InvalidArgumentError("optimizer.betas: must be two numbers");
      spec.optimizer.betas = {o.betas(0), o.betas(1)};
    }
    if (o.has_decay_1d()) spec.optimizer.decay_1d = o.decay_1d();
    if (o.has_clip_grad_norm()) spec.optimizer.clip_grad_norm = o.clip_grad_norm();
    if (o.has_schedule()) {
      const v1::LrSchedule& s = o.schedule();
      if (!s.kind().empty()) spec.optimizer.schedule.kind = s.kind();
      if (s.has_warmup_iterations()) {
        spec.optimizer.schedule.warmup_iterations = s.warmup_iterations();
      }
      if (s.has_min_lr()) spec.optimizer.schedule.min_lr = s.min_lr();
    }
  }
  if (p.has_data()) spec.data = DataFromProto(p.data());
  if (p.has_eval()) {
    if (!p.eval().has_data()) return InvalidArgumentError("eval.data: is required");
    spec.eval = EvalSpec{DataFromProto(p.eval().data()), p.eval().every_iterations()};
    if (p.eval().has_batch()) spec.eval->batch = p.eval().batch();
  }
  if (p.has_seed()) spec.seed = p.seed();
  if (p.has_requeue_on_failure()) spec.requeue_on_failure = p.requeue_on_failure();
  spec.on_node_loss = p.on_node_loss();
  if (!p.profile().empty()) spec.profile = p.profile();
  if (!p.batch_norm().empty()) spec.batch_norm = p.batch_norm();
  if (p.has_concurrent_branches()) spec.concurrent_branches = p.concurrent_branches();
  spec.checkpoint_path = p.checkpoint_path();
  spec.checkpoint_dir = p.checkpoint_dir();
  if (p.has_checkpoint_every_iterations()) {
    spec.checkpoint_every_iterations = p.checkpoint_every_iterations();
  }
  if (p.has_checkpoint_keep()) spec.checkpoint_keep = p.checkpoint_keep();
  if (p.has_checkpoint_every_seconds())
    spec.checkpoint_every_seconds = p.checkpoint_every_seconds();
  if (p.has_num_classes()) spec.num_classes = p.num_classes();
  if (p.has_image_size()) spec.image_size = p.image_size();
  if (p.has_gradient_bucket_mb()) spec.gradient_bucket_mb = p.gradient_bucket_mb();
  if (spec.name.empty()) spec.name = spec.model.empty() ? "job" : spec.model;
  RETURN_IF_ERROR(ValidateJobSpec(spec));
  return spec;
}

v1::JobSpec JobSpecToProto(const JobSpec& spec) {
  v1::JobSpec p;
  p.set_name(spec.name);
  p.set_model(spec.model);
  p.set_graph_json(spec.graph_json);
  p.set_role(spec.role == JobRole::kBg ? v1::JOB_ROLE_BG : v1::JOB_ROLE_FG);
  p.set_priority(spec.priority);
  p.set_global_batch(spec.global_batch);
  p.set_gpus(spec.gpus);
  p.set_amplification_limit(spec.amplification_limit);
  if (!spec.init_path.empty()) p.mutable_init()->set_path(spec.init_path);
  if (spec.precision) p.set_precision(planner::PrecisionName(*spec.precision));
  if (spec.accumulation_steps != 1) p.set_accumulation_steps(spec.accumulation_steps);
  if (spec.gradient_precision != planner::Precision::kFp32) {
    p.set_gradient_precision(planner::PrecisionName(spec.gradient_precision));
  }
  if (spec.memory_format != planner::MemoryFormat::kAuto) {
    p.set_memory_format(planner::MemoryFormatName(spec.memory_format));
  }
  if (spec.epochs > 0) {
    p.set_epochs(spec.epochs);
  } else {
    p.set_iterations(spec.iterations);
  }
  v1::OptimizerSpec* o = p.mutable_optimizer();
  o->set_name(spec.optimizer.name);
  o->set_lr(spec.optimizer.lr);
  o->set_momentum(spec.optimizer.momentum);
  o->set_weight_decay(spec.optimizer.weight_decay);
  o->add_betas(spec.optimizer.betas[0]);
  o->add_betas(spec.optimizer.betas[1]);
  o->set_eps(spec.optimizer.eps);
  o->set_decay_1d(spec.optimizer.decay_1d);
  o->set_clip_grad_norm(spec.optimizer.clip_grad_norm);
  if (!(spec.optimizer.schedule == protocol::LrScheduleSpec{})) {
    v1::LrSchedule* s = o->mutable_schedule();
    s->set_kind(spec.optimizer.schedule.kind);
    s->set_warmup_iterations(spec.optimizer.schedule.warmup_iterations);
    s->set_min_lr(spec.optimizer.schedule.min_lr);
  }
  DataToProto(spec.data, p.mutable_data());
  p.set_seed(spec.seed);
  p.set_requeue_on_failure(spec.requeue_on_failure);
  p.set_on_node_loss(spec.on_node_loss);
  p.set_profile(spec.profile);
  p.set_batch_norm(spec.batch_norm);
  p.set_concurrent_branches(spec.concurrent_branches);
  p.set_checkpoint_path(spec.checkpoint_path);
  if (!spec.checkpoint_dir.empty()) {
    p.set_checkpoint_dir(spec.checkpoint_dir);
    p.set_checkpoint_every_iterations(spec.checkpoint_every_iterations);
    p.set_checkpoint_keep(spec.checkpoint_keep);
    if (spec.checkpoint_every_seconds > 0) {
      p.set_checkpoint_every_seconds(spec.checkpoint_every_seconds);
    }
  }
  if (spec.num_classes > 0) p.set_num_classes(spec.num_classes);
  if (spec.image_size > 0) p.set_image_size(spec.image_size);
  p.set_gradient_bucket_mb(spec.gradient_bucket_mb);
  if (spec.eval) {
    DataToProto(spec.eval->data, p.mutable_eval()->mutable_data());
    p.mutable_eval()->set_every_iterations(spec.eval->every_iterations);
    if (spec.eval->batch) p.mutable_eval()->set_batch(*spec.eval->batch);
  }
  return p;
}

}  // namespace deepool::jobspec
