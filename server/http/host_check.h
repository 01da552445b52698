// Which Host headers the HTTP port answers (DNS rebinding, DESIGN 3.16).
//
// A page on an attacker's domain can make a browser send requests to
// failoverd by re-pointing its own name at failoverd's address; the browser
// then treats failoverd as that page's origin and sends the attacker's name as
// Host. Refusing names failoverd was not told about stops that. An IP literal
// is always answered (a page whose origin is failoverd's own address is not a
// rebinding), as are "localhost" and the names given by --http-allowed-hosts.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace failover::http {

class HostCheck {
 public:
  // `names`: the listen host and the configured names; "*" allows any Host.
  explicit HostCheck(const std::vector<std::string>& names);

  // True when a request carrying this Host header (with or without a port,
  // any case) may be served. No Host header at all (HTTP/1.0 tools) is allowed:
  // browsers always send one.
  bool Allowed(std::string_view host_header) const;

 private:
  bool any_ = false;
  std::vector<std::string> names_;  // lower case, no port, no brackets
};

}  // namespace failover::http
