#include "common/thread_name.h"

#include <pthread.h>

namespace deepool {

void SetCurrentThreadName(const std::string& name) {
  // pthread_setname_np fails (ERANGE) on names over 15 characters instead of cutting them.
  pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
}

}  // namespace deepool
