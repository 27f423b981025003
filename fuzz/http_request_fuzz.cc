// HTTP request heads as the metrics endpoint (common/http_endpoint.h) reads them from whoever
// connects: any bytes up to the blank line.
#include <string>

#include "common/http_endpoint.h"
#include "fuzz/fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::map<std::string, std::function<deepool::HttpResponse()>> routes = {
      {"/metrics", [] { return deepool::HttpResponse{}; }}};
  const deepool::HttpResponse response =
      deepool::AnswerHttpRequest(std::string(deepool::fuzz::AsText(data, size)), routes);
  if (response.status < 200 || response.status > 599) __builtin_trap();
  return 0;
}
