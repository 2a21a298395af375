// HttpGet: one plain GET over HTTP/1.0 for tests and the load tool (the coordinator's /metrics
// and dashboard ports), read until the server closes. No client library: the point is to see the
// server's bytes as they are.
#ifndef SHARDLINE_COORDINATOR_TESTING_HTTP_GET_H_
#define SHARDLINE_COORDINATOR_TESTING_HTTP_GET_H_

#include <string>

namespace shardline::coordinator {

// GET http://<address><path> ("host:port", IPv4); the whole response (status line, headers,
// body), or "connect failed" when the connection cannot be made.
std::string HttpGet(const std::string& address, const std::string& path);

}  // namespace shardline::coordinator

#endif  // SHARDLINE_COORDINATOR_TESTING_HTTP_GET_H_
