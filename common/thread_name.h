// Names the calling thread, so `top -H`, gdb and crash reports show which part of a daemon a
// thread belongs to. Linux keeps 15 characters; longer names are cut.
// Threading: affects only the calling thread.
#pragma once

#include <string>

namespace deepool {

void SetCurrentThreadName(const std::string& name);

}  // namespace deepool
