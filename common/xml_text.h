// Text inside XML (the SVG pictures deepool draws). Threading: a pure function.
#pragma once

#include <string>
#include <string_view>

namespace deepool {

// `text` escaped for XML content and attribute values (<, >, &, ", '). XML 1.0 forbids most
// control characters even as references, so they become spaces.
std::string XmlEscape(std::string_view text);

}  // namespace deepool
