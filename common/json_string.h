// A JSON string literal for text failoverd writes by hand (log lines, the
// HTTP port's error bodies): quotes, backslashes and control characters
// escaped. The text must already be valid UTF-8.
#pragma once

#include <string>

#include "absl/strings/string_view.h"

namespace failover {

std::string JsonString(absl::string_view s);

}  // namespace failover
