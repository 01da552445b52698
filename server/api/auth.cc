#include "server/api/auth.h"

#include <algorithm>
#include <fstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "common/trailers.h"
#include "common/utf8.h"

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
    const bool known_role = parts[0] == "decide" || parts[0] == "admin" || parts[0] == "peer";
    if ((parts.size() != 2 && parts.size() != 3) || !known_role) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ":", n, ": expected \"<decide|admin|peer> <token>\" or \"<decide|admin|peer> <name> <token>\""));
    }
    std::string name;
    if (parts.size() == 3) {
      name = parts[1];
      const bool ok = name.size() <= 64 && std::all_of(name.begin(), name.end(), [](char c) {
        return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-' || c == '@';
      });
      if (!ok) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ":", n, ": a token's name is 1..64 characters of A-Za-z0-9._@-"));
      }
    }
    const Role role = parts[0] == "admin" ? Role::kAdmin : parts[0] == "peer" ? Role::kPeer : Role::kDecide;
    tokens.push_back(Token{parts.back(), role, std::move(name)});
  }
  if (tokens.empty()) return absl::InvalidArgumentError(absl::StrCat(path, ": no tokens"));
  return tokens;
}

std::string Authorizer::TokenFor(Role role) const {
  // The least a call needs: a token of the role itself before an admin one,
  // so replicas relay reports with a decide token when the file has one.
  const std::shared_ptr<const Tokens> all = tokens();
  std::vector<Role> wanted = {role};
  if (role == Role::kPeer) wanted.push_back(Role::kDecide);
  wanted.push_back(Role::kAdmin);
  for (Role r : wanted) {
    for (const Token& t : *all) {
      if (t.role == r) return t.value;
    }
  }
  return "";
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
    if (t.role == Role::kAdmin || t.role == needed || (t.role == Role::kPeer && needed == Role::kDecide)) {
      return absl::OkStatus();
    }
    return absl::PermissionDeniedError("this token may only make decisions and read state (PickTarget, "
                                       "ReportOutcome, Probe, WatchEvents, GetStatus, ListEvents); admin calls need "
                                       "an admin token");
  }
  return absl::UnauthenticatedError("unknown bearer token");
}

std::optional<Authorizer::Token> Authorizer::Presented(const grpc::ServerContextBase& ctx) const {
  const auto& metadata = ctx.client_metadata();
  auto it = metadata.find("authorization");
  if (it == metadata.end()) return std::nullopt;
  const std::string header(it->second.data(), it->second.size());
  constexpr absl::string_view kBearer = "Bearer ";
  if (header.size() <= kBearer.size() || !absl::StartsWithIgnoreCase(header, kBearer)) return std::nullopt;
  const std::string presented = header.substr(kBearer.size());
  for (const Token& t : *tokens()) {
    if (SameSecret(presented, t.value)) return t;
  }
  return std::nullopt;
}

bool Authorizer::IsPeer(const grpc::ServerContextBase& ctx) const {
  const std::optional<Token> t = Presented(ctx);
  return t && t->role == Role::kPeer;
}

std::string Authorizer::TokenName(const grpc::ServerContextBase& ctx) const {
  const std::optional<Token> t = Presented(ctx);
  return t ? t->name : "";
}

std::string CallerOf(const grpc::ServerContextBase& ctx, const Authorizer* auth) {
  if (auth != nullptr) {
    std::string name = auth->TokenName(ctx);
    if (!name.empty()) return name;
  }
  if (const auto identity = ctx.auth_context(); identity != nullptr) {
    const auto cn = identity->FindPropertyValues("x509_common_name");
    if (!cn.empty()) return absl::StrCat("cn=", SanitizeUtf8(std::string(cn.front().data(), cn.front().size()), 128));
  }
  const std::string peer = ctx.peer();
  // gRPC 1.51 names the peer of an in-process call "unknown" (no TCP peer can be).
  if (peer == "unknown" || absl::StartsWith(peer, "inproc")) {
    const auto& metadata = ctx.client_metadata();
    auto it = metadata.find(kHttpPeerMetadata);
    if (it != metadata.end()) {
      return absl::StrCat("http:", SanitizeUtf8(std::string(it->second.data(), it->second.size()), 128));
    }
  }
  return SanitizeUtf8(peer, 128);
}

namespace {
thread_local std::string current_caller;
}  // namespace

CallerScope::CallerScope(std::string caller) : previous_(std::move(current_caller)) {
  current_caller = std::move(caller);
}

CallerScope::~CallerScope() { current_caller = std::move(previous_); }

const std::string& CallerScope::Current() { return current_caller; }

}  // namespace failover::api
