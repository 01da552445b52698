#include "server/http/host_check.h"

#include <arpa/inet.h>

#include <algorithm>

#include "absl/strings/ascii.h"

namespace failover::http {
namespace {

// "Name:port" -> "name", "[::1]:80" -> "::1"; lower case, a trailing dot dropped.
std::string HostName(std::string_view host) {
  std::string out;
  if (!host.empty() && host.front() == '[') {
    const size_t close = host.find(']');
    out = std::string(host.substr(1, close == std::string_view::npos ? std::string_view::npos : close - 1));
  } else {
    const size_t colon = host.find(':');
    out = std::string(host.substr(0, colon));
  }
  out = absl::AsciiStrToLower(out);
  if (!out.empty() && out.back() == '.') out.pop_back();
  return out;
}

bool IsIpLiteral(const std::string& name) {
  unsigned char buffer[16];
  return inet_pton(AF_INET, name.c_str(), buffer) == 1 || inet_pton(AF_INET6, name.c_str(), buffer) == 1;
}

}  // namespace

HostCheck::HostCheck(const std::vector<std::string>& names) {
  names_.push_back("localhost");
  for (const std::string& name : names) {
    if (name == "*") any_ = true;
    const std::string host = HostName(name);
    if (!host.empty()) names_.push_back(host);
  }
}

bool HostCheck::Allowed(std::string_view host_header) const {
  if (any_ || host_header.empty()) return true;
  const std::string name = HostName(host_header);
  if (IsIpLiteral(name)) return true;
  return std::find(names_.begin(), names_.end(), name) != names_.end();
}

}  // namespace failover::http
