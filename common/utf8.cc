#include "common/utf8.h"

#include <algorithm>
#include <cstdint>

namespace failover {
namespace {

// Length of the well-formed sequence at the start of `s`, or 0.
size_t SequenceLength(absl::string_view s) {
  const auto b = [&](size_t i) { return static_cast<uint8_t>(s[i]); };
  const auto cont = [&](size_t i) { return i < s.size() && (b(i) & 0xC0) == 0x80; };
  const uint8_t c = b(0);
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) return cont(1) ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    if (!cont(1) || !cont(2)) return 0;
    if (c == 0xE0 && b(1) < 0xA0) return 0;   // overlong
    if (c == 0xED && b(1) >= 0xA0) return 0;  // surrogate
    return 3;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    if (!cont(1) || !cont(2) || !cont(3)) return 0;
    if (c == 0xF0 && b(1) < 0x90) return 0;   // overlong
    if (c == 0xF4 && b(1) >= 0x90) return 0;  // past U+10FFFF
    return 4;
  }
  return 0;
}

constexpr absl::string_view kReplacement = "\xEF\xBF\xBD";
constexpr absl::string_view kEllipsis = "...";

}  // namespace

size_t FirstInvalidUtf8(absl::string_view s) {
  size_t at = 0;
  while (at < s.size()) {
    const size_t n = SequenceLength(s.substr(at));
    if (n == 0) return at;
    at += n;
  }
  return absl::string_view::npos;
}

bool IsValidUtf8(absl::string_view s) { return FirstInvalidUtf8(s) == absl::string_view::npos; }

std::string SanitizeUtf8(absl::string_view s, size_t max_bytes) {
  std::string out;
  out.reserve(std::min(s.size(), max_bytes) + kReplacement.size());
  while (!s.empty() && out.size() <= max_bytes) {
    const size_t n = SequenceLength(s);
    const absl::string_view piece = n == 0 ? kReplacement : s.substr(0, n);
    out.append(piece.data(), piece.size());
    s.remove_prefix(n == 0 ? 1 : n);
  }
  if (out.size() <= max_bytes && s.empty()) return out;
  // Too long: cut on a character boundary, leaving room for the marker.
  size_t cut = max_bytes >= kEllipsis.size() ? max_bytes - kEllipsis.size() : 0;
  while (cut > 0 && (static_cast<uint8_t>(out[cut]) & 0xC0) == 0x80) --cut;
  out.resize(cut);
  if (out.size() + kEllipsis.size() <= max_bytes) out.append(kEllipsis.data(), kEllipsis.size());
  return out;
}

}  // namespace failover
