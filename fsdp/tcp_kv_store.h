// TcpKvStore: a KvStore served over TCP by one process (rank 0, like torchrun's
// MASTER_ADDR/MASTER_PORT store) and used by every rank, including the serving one.
//
//   TcpKvServer (tcp_kv_server.h): the server; its caps and its security.
//   TcpKvStore (here): the client. Keeps a small pool of connections so that a Get blocked
//     waiting for a key in one thread does not stop another thread from setting it. With
//     Options::serve it also starts a TcpKvServer on host:port (port 0 picks a free port; read
//     it back with port()).
//   tcp_kv_wire.h: the frames both exchange; tcp_kv_socket.h: the deadline-bound socket I/O.
//
// Every connection opens with the shared secret (docs/security.md, "Bootstrap store").
//
// Thread safety: safe to call from several threads.
#ifndef SHARDLINE_FSDP_TCP_KV_STORE_H_
#define SHARDLINE_FSDP_TCP_KV_STORE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "fsdp/kv_store.h"
#include "fsdp/tcp_kv_server.h"

namespace shardline::fsdp {

class TcpKvStore : public KvStore {
 public:
  struct Options {
    std::string host = "127.0.0.1";  // Where the server is (or, with serve, where to bind).
    int port = 0;                    // Server port; with serve, 0 picks a free one.
    bool serve = false;              // Start the server in this process (rank 0).
    // Presented in every connection's hello (and, with serve, required of every client).
    std::string secret;
    // With serve: the server's caps (host, port and secret above win over the ones here).
    TcpKvServer::Options server;
    // How long to keep retrying the first connection while the server is not up yet.
    absl::Duration connect_timeout = absl::Seconds(60);
  };

  // Errors: UNAVAILABLE if serve is set and binding fails. Connecting happens lazily, on the
  // first call, so constructing the clients before the server is up is fine.
  static absl::StatusOr<std::unique_ptr<TcpKvStore>> Create(const Options& options);
  ~TcpKvStore() override;

  // The server's port (useful with serve and port 0).
  int port() const { return port_; }

  // Errors: UNAVAILABLE if the server cannot be reached within connect_timeout or the
  // connection breaks; PERMISSION_DENIED if it refuses the secret; RESOURCE_EXHAUSTED naming the
  // cap (max_connections, max_keys, max_value_bytes, ...) the call would exceed.
  absl::Status Set(absl::string_view key, absl::string_view value) override;
  // Errors: DEADLINE_EXCEEDED naming the missing keys; UNAVAILABLE as for Set.
  absl::StatusOr<std::vector<std::string>> Get(const std::vector<std::string>& keys,
                                               absl::Duration timeout) override;

 private:
  TcpKvStore(Options options, std::unique_ptr<TcpKvServer> server, int port);
  // A pooled connection, or a new one that has completed its hello.
  absl::StatusOr<int> Acquire();
  // Connects to the server once; UNAVAILABLE when nothing answers.
  absl::StatusOr<int> Connect(absl::Time deadline, std::string* last_error);
  void Release(int fd);
  // Sends `request` and reads the reply on a pooled connection, within `deadline`.
  absl::StatusOr<std::vector<std::string>> Call(const std::vector<std::string>& request,
                                                absl::Time deadline);

  const Options options_;
  std::unique_ptr<TcpKvServer> server_;
  const int port_;
  absl::Mutex mu_;
  std::vector<int> idle_fds_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shardline::fsdp

#endif  // SHARDLINE_FSDP_TCP_KV_STORE_H_
