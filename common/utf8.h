// UTF-8 checks for every string that enters failoverd's state: proto3 strings
// must be valid UTF-8, so one bad byte stored in a target or an event would
// make every response that carries it unparseable.
#pragma once

#include <cstddef>
#include <string>

#include "absl/strings/string_view.h"

namespace failover {

// Well-formed UTF-8 (no overlong forms, surrogates or code points past U+10FFFF).
bool IsValidUtf8(absl::string_view s);
// The offset of the first byte that is not part of a well-formed sequence, or npos.
size_t FirstInvalidUtf8(absl::string_view s);

// `s` with every byte that is not part of a well-formed sequence replaced by
// U+FFFD, cut to at most `max_bytes` on a character boundary; "..." marks a cut.
std::string SanitizeUtf8(absl::string_view s, size_t max_bytes);

}  // namespace failover
