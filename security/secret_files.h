// The one place where deepool checks who else may touch a file it trusts, before reading it: a
// private key or a bearer token that group or others may read is refused, as ssh refuses a
// private key of mode 0644; a file that decides who gets in (the users file) is refused when
// group or others may write it, as sshd refuses such an authorized_keys (anyone able to write it
// could add their own token). Daemons and the CLI alike refuse at start-up rather than warn: a
// warning in a log nobody reads protects nothing.
// Every error names the file, its mode and the fix (`chmod 600 PATH`).
// Threading: pure functions over the file system.
#pragma once

#include <string>

#include "common/status.h"

namespace deepool::security {

enum class FileTrust {
  kSecret,     // a key or a token: no permission bits for group or others at all
  kProtected,  // not secret, but it grants access: group and others must not write it
};

// FAILED_PRECONDITION when the file's mode gives group or others more than `trust` allows;
// NOT_FOUND when it cannot be examined. `what` describes the file for people ("the private key
// (--tls-key)"). The mode is that of the file a symbolic link leads to.
Status CheckSecretFileMode(const std::string& path, const std::string& what,
                           FileTrust trust = FileTrust::kSecret);

// Reads the whole file after the check above, examining the very file it opened (no window
// between the check and the read for a rename to slip into).
StatusOr<std::string> ReadSecretFile(const std::string& path, const std::string& what,
                                     FileTrust trust = FileTrust::kSecret);

}  // namespace deepool::security
