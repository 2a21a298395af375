// TcpKvServer: the server of the TCP kv store (tcp_kv_store.h), run by one process (rank 0,
// like torchrun's MASTER_ADDR/MASTER_PORT store). It owns a listening socket and a thread per
// open client connection and keeps the map in memory. A Get waits on the server until all keys
// exist or its timeout passes, so clients do not poll. A finished connection's fd is closed and
// its thread joined right away. The frames it reads and writes: tcp_kv_wire.h.
//
// Security (docs/security.md, "Bootstrap store"): a connection must open with the shared secret
// (the launcher's SHARDLINE_STORE_SECRET), compared in constant time; otherwise it is refused and
// closed, with the reason logged. The secret and values travel in clear text, like Gloo's own
// traffic: isolate the network. Every resource a client can make the server hold is capped
// (connections, keys, bytes per key / value / request / in total), and a declared length is
// checked against its cap before anything is allocated. When accept4 runs out of descriptors
// (EMFILE / ENFILE) the server logs once and retries every 100 ms instead of spinning.
//
// Thread safety: safe to call from several threads. Destroying a TcpKvServer closes every
// connection and joins its threads; blocked clients then get UNAVAILABLE.
#ifndef SHARDLINE_FSDP_TCP_KV_SERVER_H_
#define SHARDLINE_FSDP_TCP_KV_SERVER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace shardline::fsdp {

class TcpKvServer {
 public:
  struct Options {
    std::string host = "127.0.0.1";  // Address to bind (numeric or a resolvable name).
    int port = 0;                    // 0 picks a free port.
    // Every client must present this in its hello ("" accepts only the empty secret).
    std::string secret;
    // Open connections (handshaking or served); one more is refused with RESOURCE_EXHAUSTED.
    int max_connections = 256;
    // Bootstrap values are addresses and ids (a few KiB); the caps leave wide room for them.
    size_t max_keys = 65536;
    size_t max_key_bytes = 4096;
    size_t max_value_bytes = 1 << 20;
    size_t max_total_bytes = 64 << 20;   // Keys plus values held.
    size_t max_request_bytes = 2 << 20;  // One request frame, every field together.
    // One get's values together: a get may name each key once, and the reply copies their
    // values, so without this a small request could build a reply of max_total_bytes.
    size_t max_reply_bytes = 8 << 20;
    // A connection must complete its hello within this long; once a request starts, its last
    // byte must arrive within request_timeout.
    absl::Duration handshake_timeout = absl::Seconds(10);
    absl::Duration request_timeout = absl::Seconds(60);
  };

  // Binds, listens and starts the accept thread. Errors: UNAVAILABLE if it cannot bind;
  // INVALID_ARGUMENT for a cap below 1.
  static absl::StatusOr<std::unique_ptr<TcpKvServer>> Create(const Options& options);
  ~TcpKvServer();  // Shuts down: closes the sockets and joins every thread.

  int port() const { return port_; }
  // Open connections, including finished ones whose thread is not yet joined and whose
  // descriptor is not yet closed (tests: 0 means every connection's resources are released).
  int connection_count() const;

 private:
  struct Connection {
    std::thread thread;
    int fd = -1;
  };
  struct Pipe {
    int read = -1;
    int write = -1;
  };
  TcpKvServer(const Options& options, int listen_fd, Pipe wake, Pipe reap, int port);
  void AcceptLoop();
  // Accepts one pending connection; false when the process is out of descriptors.
  bool AcceptOne();
  // Joins the threads of finished connections and closes their fds.
  void ReapFinished();
  void ServeConnection(uint64_t id, int fd, std::string peer);
  // Reads and checks the hello; OK when the connection may make requests.
  absl::Status Handshake(int fd);
  // Reads one request frame, refusing a declared length over its cap before allocating it.
  absl::StatusOr<std::vector<std::string>> ReadRequest(int fd);
  // Handles one request frame; returns the reply frame.
  std::vector<std::string> Handle(const std::vector<std::string>& request);
  std::vector<std::string> HandleSetLocked(const std::string& key, const std::string& value)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  const int listen_fd_;
  const Pipe wake_;  // Readable once shutdown starts; wakes every poll().
  const Pipe reap_;  // A byte per finished connection; wakes the accept loop to join it.
  const int port_;

  mutable absl::Mutex mu_;
  std::map<std::string, std::string> data_ ABSL_GUARDED_BY(mu_);
  size_t data_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // Keys plus values in data_.
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t next_connection_id_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<uint64_t, Connection> connections_ ABSL_GUARDED_BY(mu_);
  std::vector<uint64_t> finished_ ABSL_GUARDED_BY(mu_);
  int reaping_ ABSL_GUARDED_BY(mu_) = 0;  // Taken out of connections_, not yet joined and closed.
  std::thread accept_thread_;
};

}  // namespace shardline::fsdp

#endif  // SHARDLINE_FSDP_TCP_KV_SERVER_H_
