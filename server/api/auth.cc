#include "server/api/auth.h"

#include <fstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"

namespace failover::api {
namespace {

// Compares without stopping at the first difference.
bool SameSecret(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i % (b.empty() ? 1 : b.size())]);
  return diff == 0 && !b.empty();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Authorizer>> Authorizer::FromFile(const std::string& path) {
  auto auth = std::make_unique<Authorizer>();
  auth->path_ = path;
  RETURN_IF_ERROR(auth->Reload());
  return auth;
}

absl::Status Authorizer::Reload() {
  ASSIGN_OR_RETURN(Tokens loaded, ReadTokens(path_));
  auto shared = std::make_shared<const Tokens>(std::move(loaded));
  std::unique_lock<std::shared_mutex> lock(mu_);
  tokens_ = std::move(shared);
  return absl::OkStatus();
}

size_t Authorizer::token_count() const { return tokens()->size(); }

std::shared_ptr<const Authorizer::Tokens> Authorizer::tokens() const {
  std::shared_lock<std::shared_mutex> lock(mu_);
  return tokens_;
}

absl::StatusOr<Authorizer::Tokens> Authorizer::ReadTokens(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("tokens file ", path, " cannot be read"));
  Tokens tokens;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (const size_t hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    std::vector<std::string> parts = absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipWhitespace());
    if (parts.empty()) continue;
    if (parts.size() != 2 || (parts[0] != "decide" && parts[0] != "admin")) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ":", n, ": expected \"decide <token>\" or \"admin <token>\""));
    }
    tokens.push_back(Token{parts[1], parts[0] == "admin" ? Role::kAdmin : Role::kDecide});
  }
  if (tokens.empty()) return absl::InvalidArgumentError(absl::StrCat(path, ": no tokens"));
  return tokens;
}

absl::Status Authorizer::Check(const grpc::ServerContextBase& ctx, Role needed) const {
  const auto& metadata = ctx.client_metadata();
  auto it = metadata.find("authorization");
  if (it == metadata.end()) return absl::UnauthenticatedError("missing bearer token (authorization metadata)");
  const std::string header(it->second.data(), it->second.size());
  constexpr absl::string_view kBearer = "Bearer ";
  if (header.size() <= kBearer.size() || !absl::StartsWithIgnoreCase(header, kBearer)) {
    return absl::UnauthenticatedError("authorization metadata is not a bearer token");
  }
  const std::string presented = header.substr(kBearer.size());
  const std::shared_ptr<const Tokens> tokens = this->tokens();
  for (const Token& t : *tokens) {
    if (!SameSecret(presented, t.value)) continue;
    if (t.role == Role::kAdmin || t.role == needed) return absl::OkStatus();
    return absl::PermissionDeniedError("this token may only make decisions and read state (PickTarget, "
                                       "ReportOutcome, Probe, WatchEvents, GetStatus, ListEvents); admin calls need "
                                       "an admin token");
  }
  return absl::UnauthenticatedError("unknown bearer token");
}

}  // namespace failover::api
