// RETURN_IF_ERROR / ASSIGN_OR_RETURN for absl::Status, defined once for the
// whole project (Debian's Abseil 20220623 ships no status macros).
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define FAILOVER_CONCAT_INNER(a, b) a##b
#define FAILOVER_CONCAT(a, b) FAILOVER_CONCAT_INNER(a, b)

#define RETURN_IF_ERROR(expr)                  \
  do {                                         \
    ::absl::Status failover_status_ = (expr);  \
    if (!failover_status_.ok()) return failover_status_; \
  } while (false)

#define ASSIGN_OR_RETURN(lhs, expr)                                   \
  FAILOVER_ASSIGN_OR_RETURN_IMPL(FAILOVER_CONCAT(failover_sor_, __LINE__), lhs, expr)

#define FAILOVER_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                   \
  if (!tmp.ok()) return std::move(tmp).status();       \
  lhs = std::move(tmp).value()
