// SharedText: an immutable string whose copies share one buffer, so copying a value that holds
// one costs a reference count, not its bytes. For the large documents a job carries (its inline
// graph and its plan, up to 8 MiB each): job records are copied by every status query, watch
// update and scheduling round, and copying the documents with them made one user's large jobs
// cost every caller (docs/reliability.md, "One user's large jobs").
//
// It reads as a const std::string (str(), and an implicit conversion); assigning a string stores
// a new buffer. Two SharedTexts compare by their text.
// Threading: the text never changes; copies may be made, read and destroyed on any threads.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

namespace deepool {

class SharedText {
 public:
  SharedText() = default;
  SharedText(std::string text)  // NOLINT(google-explicit-constructor): a string is stored as is
      : text_(text.empty() ? nullptr : std::make_shared<const std::string>(std::move(text))) {}
  SharedText(const char* text)  // NOLINT(google-explicit-constructor)
      : SharedText(std::string(text)) {}

  const std::string& str() const { return text_ ? *text_ : Empty(); }
  operator const std::string&() const { return str(); }  // NOLINT(google-explicit-constructor)
  operator std::string_view() const { return str(); }    // NOLINT(google-explicit-constructor)
  bool empty() const { return !text_; }
  size_t size() const { return text_ ? text_->size() : 0; }

  // Whether both hold the very same buffer (one was copied from the other), so nothing was
  // copied and nothing changed.
  bool SharesBufferWith(const SharedText& other) const { return text_ == other.text_; }

  friend bool operator==(const SharedText& a, const SharedText& b) {
    return a.text_ == b.text_ || a.str() == b.str();
  }
  friend bool operator!=(const SharedText& a, const SharedText& b) { return !(a == b); }

 private:
  static const std::string& Empty() {
    static const std::string empty;
    return empty;
  }

  std::shared_ptr<const std::string> text_;  // null when empty
};

}  // namespace deepool
