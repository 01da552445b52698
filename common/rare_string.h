// A string that most objects leave empty (a target's last error, a chain's
// pin): a pointer's 8 bytes while empty, where a std::string always takes 32.
// With 10,000 chains of two targets those 24 bytes, with the allocator's
// rounding, were about 0.1 KiB a chain.
//
// A value type: copies are deep. Reads go through str() (or the conversion to
// const std::string&); a reference taken stays valid until the next
// assignment, as with std::string, except that assigning "" frees it.
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "absl/strings/string_view.h"

namespace failover {

class RareString {
 public:
  RareString() = default;
  RareString(const RareString& o) : value_(o.value_ ? std::make_unique<std::string>(*o.value_) : nullptr) {}
  RareString(RareString&&) noexcept = default;
  RareString& operator=(const RareString& o) { return *this = o.str(); }
  RareString& operator=(RareString&&) noexcept = default;
  RareString& operator=(std::string s) {
    if (s.empty()) {
      value_.reset();
    } else if (value_) {
      *value_ = std::move(s);
    } else {
      value_ = std::make_unique<std::string>(std::move(s));
    }
    return *this;
  }

  const std::string& str() const { return value_ ? *value_ : Empty(); }
  operator const std::string&() const { return str(); }  // NOLINT: reads as the string it holds
  bool empty() const { return value_ == nullptr; }
  void clear() { value_.reset(); }
  bool operator==(absl::string_view s) const { return absl::string_view(str()) == s; }
  bool operator!=(absl::string_view s) const { return !(*this == s); }

 private:
  static const std::string& Empty() {
    static const std::string* const kEmpty = new std::string;
    return *kEmpty;
  }
  std::unique_ptr<std::string> value_;  // never holds ""
};

}  // namespace failover
