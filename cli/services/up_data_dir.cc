#include "cli/services/up_data_dir.h"

#include "security/cert_files.h"

namespace deepool::cli {

namespace fs = std::filesystem;

Status ClaimUpDataDir(const fs::path& dir) {
  std::error_code ec;
  const fs::path marker = dir / kUpDataDirMarker;
  if (fs::exists(marker, ec)) return Status::Ok();
  if (fs::exists(dir, ec) && !(fs::is_directory(dir, ec) && fs::is_empty(dir, ec))) {
    return FailedPreconditionError("--data-dir " + dir.string() +
                                   " is not an empty folder and was not made by deepool up (no " +
                                   kUpDataDirMarker + " in it); give a new or empty folder");
  }
  fs::create_directories(dir, ec);
  if (ec) return InternalError("cannot create " + dir.string() + ": " + ec.message());
  return security::WriteNewFile(marker, "made by deepool up\n", 0644);
}

fs::path UpJobsDir(const fs::path& dir) { return dir / "jobs"; }

std::string UpPathRoot(const fs::path& dir) { return (UpJobsDir(dir) / "{user}").string(); }

}  // namespace deepool::cli
