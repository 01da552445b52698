// A report id's sender (DESIGN 3.14, invariant 4): random per process, so the
// sequences of two senders never meet in failoverd's window.
#pragma once

#include <cstdint>
#include <random>
#include <string>

#include "absl/strings/str_cat.h"

namespace failover {

inline std::string NewReportSender() {
  std::random_device rd;
  return absl::StrCat(absl::Hex((uint64_t{rd()} << 32) | rd(), absl::kZeroPad16),
                      absl::Hex((uint64_t{rd()} << 32) | rd(), absl::kZeroPad16));
}

}  // namespace failover
