// TcpKvStore: a KvStore served over TCP by one process (rank 0, like torchrun's
// MASTER_ADDR/MASTER_PORT store) and used by every rank, including the serving one.
//
//   TcpKvServer: owns a listening socket and a thread per client connection; keeps the map in
//     memory. A Get waits on the server until all keys exist or its timeout passes, so clients
//     do not poll.
//   TcpKvStore:  the client. Keeps a small pool of connections so that a Get blocked waiting
//     for a key in one thread does not stop another thread from setting it. With
//     Options::serve it also starts a TcpKvServer on host:port (port 0 picks a free port; read
//     it back with port()).
//
// Wire format (both directions): a frame is a big-endian u32 field count followed by that many
// fields, each a big-endian u32 length and that many bytes.
//   ["set", key, value]               -> ["ok"]
//   ["get", timeout_ms, key1, ...]    -> ["ok", value1, ...] | ["timeout", missing_key, ...]
//
// Thread safety: both classes are safe to call from several threads. Destroying a TcpKvServer
// closes every connection and joins its threads; blocked clients then get UNAVAILABLE.
#ifndef SHARDLINE_FSDP_TCP_KV_STORE_H_
#define SHARDLINE_FSDP_TCP_KV_STORE_H_

#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "fsdp/kv_store.h"

namespace shardline::fsdp {

class TcpKvServer {
 public:
  struct Options {
    std::string host = "127.0.0.1";  // Address to bind (numeric or a resolvable name).
    int port = 0;                    // 0 picks a free port.
  };

  // Binds, listens and starts the accept thread. Errors: UNAVAILABLE if it cannot bind.
  static absl::StatusOr<std::unique_ptr<TcpKvServer>> Create(const Options& options);
  ~TcpKvServer();  // Shuts down: closes the sockets and joins every thread.

  int port() const { return port_; }

 private:
  TcpKvServer(int listen_fd, int wake_fd_read, int wake_fd_write, int port);
  void AcceptLoop();
  void ServeConnection(int fd);
  // Handles one request frame; returns the reply frame.
  std::vector<std::string> Handle(const std::vector<std::string>& request);

  const int listen_fd_;
  const int wake_read_;  // Readable once shutdown starts; wakes every poll().
  const int wake_write_;
  const int port_;

  absl::Mutex mu_;
  std::map<std::string, std::string> data_ ABSL_GUARDED_BY(mu_);
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> connection_threads_ ABSL_GUARDED_BY(mu_);
  std::vector<int> connection_fds_ ABSL_GUARDED_BY(mu_);
  std::thread accept_thread_;
};

class TcpKvStore : public KvStore {
 public:
  struct Options {
    std::string host = "127.0.0.1";  // Where the server is (or, with serve, where to bind).
    int port = 0;                    // Server port; with serve, 0 picks a free one.
    bool serve = false;              // Start the server in this process (rank 0).
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
  // connection breaks.
  absl::Status Set(absl::string_view key, absl::string_view value) override;
  // Errors: DEADLINE_EXCEEDED naming the missing keys; UNAVAILABLE as for Set.
  absl::StatusOr<std::vector<std::string>> Get(const std::vector<std::string>& keys,
                                               absl::Duration timeout) override;

 private:
  TcpKvStore(Options options, std::unique_ptr<TcpKvServer> server, int port);
  absl::StatusOr<int> Acquire();
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
