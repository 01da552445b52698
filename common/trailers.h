// Metadata failoverd and its client library agree on.
#pragma once

namespace failover {

// Set on every error status failoverd itself returns, so a client can tell
// failoverd's answers (UNAVAILABLE when no target may be tried, NOT_FOUND, ...)
// from the transport's (failoverd cannot be reached). Its value is "1".
inline constexpr char kAnsweredTrailer[] = "failoverd-answered";

// Initial metadata of every WatchEvents stream failoverd accepted (value "1"),
// sent at once; a refused stream ends with trailers only, without it.
inline constexpr char kWatchAcceptedHeader[] = "failoverd-watch-accepted";

// Added by the HTTP port to the calls it makes in-process: the HTTP client's
// address, recorded on admin events. Trusted only on in-process calls.
inline constexpr char kHttpPeerMetadata[] = "failoverd-http-peer";

}  // namespace failover
