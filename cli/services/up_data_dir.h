// The folder `deepool up` keeps its local cluster in (--data-dir, or a temporary one), and the
// rules that keep the user's files and up's own secrets safe:
//   DIR/.deepool-up      marks the folder as up's (written when up claims a new or empty one)
//   DIR/coordinator/     the coordinator's database
//   DIR/security/        the CA, keys, certificates, users file and token (remade every run)
//   DIR/local-N/         worker N's work directory;  DIR/*.log  the daemons' logs
//   DIR/jobs/USER/       the jobs' files: the daemons' only path root is DIR/jobs/{user}, so no
//                        spec can point at the database, a key, or another user's files
// up deletes only inside a folder it claimed (DIR/security), and removes the whole folder only
// when it made it as a temporary one (no --data-dir, no --keep).
// Threading: plain functions (file I/O).
#pragma once

#include <filesystem>
#include <string>

#include "common/status.h"

namespace deepool::cli {

inline constexpr const char* kUpDataDirMarker = ".deepool-up";

// OK when `dir` is up's: marked already, or new or empty (then created and marked).
// FAILED_PRECONDITION, touching nothing, for anything else (a non-empty folder up did not make,
// or a file).
Status ClaimUpDataDir(const std::filesystem::path& dir);

// DIR/jobs, and the path root DIR/jobs/{user} the coordinator and workers get.
std::filesystem::path UpJobsDir(const std::filesystem::path& dir);
std::string UpPathRoot(const std::filesystem::path& dir);

}  // namespace deepool::cli
