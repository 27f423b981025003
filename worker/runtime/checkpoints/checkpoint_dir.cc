#include "worker/runtime/checkpoints/checkpoint_dir.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/content_digest.h"
#include "common/durable_file.h"
#include "common/logging.h"

namespace deepool::worker {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kManifestName = "MANIFEST.json";
constexpr const char* kManifestFormat = "deepool.checkpoint";
constexpr const char* kIterationPrefix = "iter-";

StatusOr<json> ReadJson(const std::string& path) {
  std::ifstream in(path);
  if (!in) return NotFoundError("no " + path);
  json doc = json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) return DataLossError(path + " is not a JSON object");
  return doc;
}

json FileToJson(const CheckpointFile& f) {
  return {{"name", f.name}, {"bytes", f.bytes}, {"digest", f.digest}};
}

StatusOr<CheckpointFile> FileFromJson(const json& doc) {
  if (!doc.is_object() || !doc.contains("name") || !doc["name"].is_string() ||
      !doc.contains("bytes") || !doc["bytes"].is_number_integer() || !doc.contains("digest") ||
      !doc["digest"].is_number_unsigned()) {
    return DataLossError("a file entry needs name, bytes and digest");
  }
  CheckpointFile f;
  f.name = doc["name"].get<std::string>();
  f.bytes = doc["bytes"].get<int64_t>();
  f.digest = doc["digest"].get<uint64_t>();
  // A name is a plain file of the checkpoint's directory, never a path out of it.
  if (f.name.empty() || f.name.find('/') != std::string::npos || f.name == "." || f.name == "..") {
    return DataLossError("file entry names '" + f.name + "'");
  }
  return f;
}

StatusOr<CheckpointManifest> ManifestFromJson(const json& doc) {
  // Compared as JSON values: json::value("format", "") throws on a number, and a manifest may be
  // anything a job's owner put in its folder (a BG job's is read inside another job's executor).
  if (!doc.is_object() || !doc.contains("format") || doc["format"] != kManifestFormat) {
    return DataLossError(std::string("format is not ") + kManifestFormat);
  }
  CheckpointManifest m;
  try {
    m.iteration = doc.at("iteration").get<int64_t>();
    m.world_size = doc.at("world_size").get<int>();
    m.job_id = doc.value("job_id", "");
    m.optimizer = doc.value("optimizer", "");
    for (const json& f : doc.at("files")) {
      ASSIGN_OR_RETURN(CheckpointFile file, FileFromJson(f));
      m.files.push_back(std::move(file));
    }
    if (doc.contains("data")) {
      const json& d = doc.at("data");
      m.data = DataPosition{d.at("samples").get<int64_t>(), d.at("global_batch").get<int64_t>(),
                            d.at("epoch").get<int64_t>(), d.at("offset").get<int64_t>()};
    }
    if (doc.contains("loss_scaling")) {
      const json& l = doc.at("loss_scaling");
      m.loss_scaling =
          LossScalerState{l.at("scale").get<double>(), l.at("good_steps").get<int64_t>(),
                          l.at("skipped_steps").get<int64_t>()};
    }
  } catch (const json::exception& e) {
    return DataLossError(std::string("manifest: ") + e.what());
  }
  if (m.iteration < 0 || m.world_size < 1 || m.files.size() != static_cast<size_t>(m.world_size)) {
    return DataLossError("manifest lists " + std::to_string(m.files.size()) + " files for " +
                         std::to_string(m.world_size) + " ranks");
  }
  return m;
}

// The checkpoints in `dir` by iteration, newest first.
std::vector<std::pair<int64_t, std::string>> ListCheckpoints(const std::string& dir) {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(kIterationPrefix, 0) != 0 || !entry.is_directory(ec)) continue;
    const std::string digits = name.substr(std::string(kIterationPrefix).size());
    // At most 18 digits: any such count fits int64 (a longer name is not one of ours).
    if (digits.empty() || digits.size() > 18 ||
        digits.find_first_not_of("0123456789") != std::string::npos) {
      continue;
    }
    found.emplace_back(std::stoll(digits), entry.path().string());
  }
  std::sort(found.begin(), found.end(), std::greater<>());
  return found;
}

// Why the checkpoint at `path` cannot be used, or its manifest.
StatusOr<CheckpointManifest> CheckCheckpoint(const std::string& path, int64_t iteration) {
  ASSIGN_OR_RETURN(json doc, ReadJson(path + "/" + kManifestName));
  ASSIGN_OR_RETURN(CheckpointManifest manifest, ManifestFromJson(doc));
  if (manifest.iteration != iteration) {
    return DataLossError("manifest says iteration " + std::to_string(manifest.iteration));
  }
  for (const CheckpointFile& listed : manifest.files) {
    ASSIGN_OR_RETURN(CheckpointFile actual, DescribeFile(path + "/" + listed.name, listed.name));
    if (actual.bytes != listed.bytes) {
      return DataLossError(listed.name + " has " + std::to_string(actual.bytes) +
                           " bytes; the manifest lists " + std::to_string(listed.bytes));
    }
    if (actual.digest != listed.digest) {
      return DataLossError(listed.name + "'s contents differ from the manifest's digest");
    }
  }
  return manifest;
}

}  // namespace

std::string CheckpointPath(const std::string& dir, int64_t iteration) {
  char name[32];
  std::snprintf(name, sizeof name, "%s%012lld", kIterationPrefix,
                static_cast<long long>(iteration));
  return (fs::path(dir) / name).string();
}

std::string RankFileName(int rank) { return "rank-" + std::to_string(rank) + ".pt"; }

StatusOr<CheckpointFile> DescribeFile(const std::string& path, const std::string& name) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFoundError("cannot read " + path);
  CheckpointFile f;
  f.name = name;
  ContentDigest digest;
  std::vector<char> buffer(1 << 20);
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    const auto got = static_cast<size_t>(in.gcount());
    digest.Update(buffer.data(), got);
    f.bytes += static_cast<int64_t>(got);
  }
  if (in.bad()) return DataLossError("reading " + path + " failed");
  f.digest = digest.Finish();
  return f;
}

Status WriteRankSidecar(const std::string& checkpoint_path, int rank, const CheckpointFile& f) {
  return ReplaceFileDurably(checkpoint_path + "/rank-" + std::to_string(rank) + ".json",
                            FileToJson(f).dump());
}

Status CommitCheckpoint(const std::string& checkpoint_path, CheckpointManifest manifest) {
  manifest.files.clear();
  for (int rank = 0; rank < manifest.world_size; ++rank) {
    const std::string sidecar = checkpoint_path + "/rank-" + std::to_string(rank) + ".json";
    StatusOr<json> doc = ReadJson(sidecar);
    if (!doc.ok()) {
      return doc.status().WithContext(
          "rank " + std::to_string(rank) +
          "'s file is not visible here (every rank's host must share the checkpoint directory)");
    }
    // Its file is not read again here: FindLatestCheckpoint checks every file when it loads.
    ASSIGN_OR_RETURN(CheckpointFile listed, FileFromJson(*doc));
    manifest.files.push_back(std::move(listed));
  }
  json files = json::array();
  for (const CheckpointFile& f : manifest.files) files.push_back(FileToJson(f));
  json doc = {{"format", kManifestFormat},         {"iteration", manifest.iteration},
              {"world_size", manifest.world_size}, {"job_id", manifest.job_id},
              {"optimizer", manifest.optimizer},   {"files", files}};
  if (manifest.data) {
    const DataPosition& d = *manifest.data;
    doc["data"] = {{"samples", d.samples},
                   {"global_batch", d.global_batch},
                   {"epoch", d.epoch},
                   {"offset", d.offset}};
  }
  if (manifest.loss_scaling) {
    const LossScalerState& l = *manifest.loss_scaling;
    doc["loss_scaling"] = {
        {"scale", l.scale}, {"good_steps", l.good_steps}, {"skipped_steps", l.skipped_steps}};
  }
  RETURN_IF_ERROR(ReplaceFileDurably(checkpoint_path + "/" + kManifestName, doc.dump(2) + "\n"));
  // The checkpoint's own name in its parent, so that a power loss cannot take the whole
  // checkpoint back after older ones were pruned for it.
  return SyncDirectory(fs::path(checkpoint_path).parent_path().string());
}

StatusOr<std::optional<FoundCheckpoint>> FindLatestCheckpoint(const std::string& dir) {
  if (dir.empty()) return std::optional<FoundCheckpoint>();
  for (const auto& [iteration, path] : ListCheckpoints(dir)) {
    StatusOr<CheckpointManifest> manifest = CheckCheckpoint(path, iteration);
    if (manifest.ok()) return std::optional<FoundCheckpoint>(FoundCheckpoint{path, *manifest});
    DP_LOG_WARN("skipped checkpoint {}: {}", path, manifest.status().ToString());
  }
  return std::optional<FoundCheckpoint>();
}

StatusOr<FoundCheckpoint> OpenCheckpoint(const std::string& dir, int64_t iteration) {
  const std::string path = CheckpointPath(dir, iteration);
  StatusOr<CheckpointManifest> manifest = CheckCheckpoint(path, iteration);
  if (!manifest.ok()) return manifest.status().WithContext("checkpoint " + path);
  return FoundCheckpoint{path, *std::move(manifest)};
}

StatusOr<int> PruneCheckpoints(const std::string& dir, int keep) {
  if (keep < 1) return InvalidArgumentError("keep must be >= 1");
  int whole = 0, removed = 0;
  for (const auto& [iteration, path] : ListCheckpoints(dir)) {
    if (whole < keep) {
      // Whole ones count towards `keep`; a partial one newer than the kept ones may still be
      // being written and stays.
      if (fs::exists(path + "/" + kManifestName)) ++whole;
      continue;
    }
    std::error_code ec;
    fs::remove_all(path, ec);
    if (ec) return UnavailableError("cannot remove " + path + ": " + ec.message());
    ++removed;
  }
  return removed;
}

}  // namespace deepool::worker
