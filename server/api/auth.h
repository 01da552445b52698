// Bearer tokens with two roles (DESIGN 3.11): decide (PickTarget,
// ReportOutcome, Probe, WatchEvents) and admin (everything). Without a tokens
// file every call is allowed. Health and reflection are separate services and
// stay open.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include <mutex>
#include <shared_mutex>

#include "absl/base/thread_annotations.h"
#include "grpcpp/grpcpp.h"

namespace failover::api {

enum class Role { kDecide, kAdmin };

class Authorizer {
 public:
  // Reads lines of "<role> <token>" (role decide or admin); '#' starts a comment.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<Authorizer>> FromFile(const std::string& path);

  // Reads the file again (SIGHUP). On an error the tokens in use stay.
  [[nodiscard]] absl::Status Reload();
  size_t token_count() const;

  // UNAUTHENTICATED without a known bearer token, PERMISSION_DENIED when the
  // token's role is not enough.
  [[nodiscard]] absl::Status Check(const grpc::ServerContextBase& ctx, Role needed) const;

 private:
  struct Token {
    std::string value;
    Role role;
  };
  using Tokens = std::vector<Token>;
  [[nodiscard]] static absl::StatusOr<Tokens> ReadTokens(const std::string& path);
  std::shared_ptr<const Tokens> tokens() const;

  std::string path_;
  mutable std::shared_mutex mu_;
  std::shared_ptr<const Tokens> tokens_ ABSL_GUARDED_BY(mu_);
};

}  // namespace failover::api
