// Bearer tokens with two roles (DESIGN 3.11): decide (PickTarget,
// ReportOutcome, Probe, WatchEvents) and admin (everything). Without a tokens
// file every call is allowed. Health and reflection are separate services and
// stay open.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"

namespace failover::api {

enum class Role { kDecide, kAdmin };

class Authorizer {
 public:
  // Reads lines of "<role> <token>" (role decide or admin); '#' starts a comment.
  [[nodiscard]] static absl::StatusOr<Authorizer> FromFile(const std::string& path);

  // UNAUTHENTICATED without a known bearer token, PERMISSION_DENIED when the
  // token's role is not enough.
  [[nodiscard]] absl::Status Check(const grpc::ServerContextBase& ctx, Role needed) const;

 private:
  struct Token {
    std::string value;
    Role role;
  };
  std::vector<Token> tokens_;
};

}  // namespace failover::api
