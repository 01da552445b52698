// Bearer tokens with two roles (DESIGN 3.11): decide (PickTarget,
// ReportOutcome, Probe, WatchEvents) and admin (everything); and peer, a decide
// token cluster replicas relay outcomes with. Without a tokens file every call
// is allowed. Health and reflection are separate services and
// stay open.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include <mutex>
#include <shared_mutex>

#include "absl/base/thread_annotations.h"
#include "grpcpp/grpcpp.h"

namespace failover::api {

// kPeer: what cluster replicas relay outcomes with; it may make decide calls.
enum class Role { kDecide, kAdmin, kPeer };

class Authorizer {
 public:
  // Reads lines of "<role> <token>" or "<role> <name> <token>" (role decide,
  // admin or peer; the name is who the token belongs to, recorded on the
  // events of its admin calls); '#' starts a comment.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<Authorizer>> FromFile(const std::string& path);

  // Reads the file again (SIGHUP). On an error the tokens in use stay.
  [[nodiscard]] absl::Status Reload();
  size_t token_count() const;
  // A token that may make calls of `role` (for calls between cluster
  // replicas, which share the file): one of that role if there is one (for
  // peer, then a decide one), else an admin token; empty when there is none.
  std::string TokenFor(Role role) const;
  // Whether the call presents a peer token.
  bool IsPeer(const grpc::ServerContextBase& ctx) const;

  // UNAUTHENTICATED without a known bearer token, PERMISSION_DENIED when the
  // token's role is not enough.
  [[nodiscard]] absl::Status Check(const grpc::ServerContextBase& ctx, Role needed) const;
  // The name of the token the call presents; empty when it has none or the
  // token is unnamed.
  std::string TokenName(const grpc::ServerContextBase& ctx) const;

 private:
  struct Token {
    std::string value;
    Role role;
    std::string name;  // empty for "<role> <token>" lines
  };
  using Tokens = std::vector<Token>;
  [[nodiscard]] static absl::StatusOr<Tokens> ReadTokens(const std::string& path);
  // The token the call presents as a bearer token, if it is one of the file's.
  std::optional<Token> Presented(const grpc::ServerContextBase& ctx) const;
  std::shared_ptr<const Tokens> tokens() const;

  std::string path_;
  mutable std::shared_mutex mu_;
  std::shared_ptr<const Tokens> tokens_ ABSL_GUARDED_BY(mu_);
};

// Who makes a call, for the events its admin calls cause: the token's name,
// else the client certificate's common name ("cn=..."), else the caller's
// address (for the HTTP port, the HTTP client's). Valid UTF-8, bounded.
std::string CallerOf(const grpc::ServerContextBase& ctx, const Authorizer* auth);

// The caller of the RPC this thread is serving (set by ServeUnary around the
// handler, which runs on the same thread), so admin handlers can record it
// without every handler taking the call.
class CallerScope {
 public:
  explicit CallerScope(std::string caller);
  ~CallerScope();
  CallerScope(const CallerScope&) = delete;
  CallerScope& operator=(const CallerScope&) = delete;
  static const std::string& Current();

 private:
  std::string previous_;
};

}  // namespace failover::api
