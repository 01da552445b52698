// Key encoding: integers big-endian so that byte order is numeric order.
#pragma once

#include <cstdint>
#include <string>

#include <string_view>

namespace failover::storage {

inline std::string EncodeUint64(uint64_t v) {
  std::string out(8, '\0');
  for (int i = 7; i >= 0; --i) {
    out[i] = static_cast<char>(v & 0xff);
    v >>= 8;
  }
  return out;
}

inline bool DecodeUint64(std::string_view in, uint64_t* v) {
  if (in.size() != 8) return false;
  uint64_t out = 0;
  for (char c : in) out = (out << 8) | static_cast<uint8_t>(c);
  *v = out;
  return true;
}

}  // namespace failover::storage
