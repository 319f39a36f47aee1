// The network side of `pmhash serve`: a TCP listener and one epoll event loop per thread
// (docs/serve.md). Every loop waits on the shared listening socket (EPOLLEXCLUSIVE: a new
// connection wakes one loop) and owns the connections it accepted; a connection's
// requests run on its loop's thread, in order, through the CommandHandler, and their
// replies go out in the same order (pipelining).
//
// What a client cannot do: make the server allocate more than max_request_bytes for one
// request in progress (a longer bulk string or pending request is a protocol error and a
// closed connection), hold more than max_output_bytes of unsent replies (the connection is
// closed: a client that sends and never reads), stay connected idle past idle_timeout,
// open more than max_clients connections, or stop other clients' loops: sockets are
// non-blocking, and a loop answers at most kRequestsPerTurn requests of one connection
// before it serves the others.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "pmhash/status.h"
#include "serve/commands.h"

namespace pmhash::serve {

struct ServerOptions {
  std::string bind = "127.0.0.1";  // loopback unless told otherwise
  uint16_t port = 6379;            // 0: any free port (tests; port() says which)
  unsigned threads = 1;            // event loops
  size_t max_request_bytes = 64u << 20;  // one request (a command and its arguments)
  size_t max_args = 1u << 20;            // arguments of one request
  size_t max_output_bytes = 256u << 20;  // unsent replies of one connection
  unsigned idle_timeout_seconds = 300;   // 0: never
  unsigned max_clients = 10000;
};

class Server {
 public:
  // `handler` must outlive the server.
  Server(CommandHandler* handler, ServerOptions options);
  ~Server();

  // Opens the listening socket: IOError naming the address if it cannot (in use, bad
  // address), InvalidArgument for a bind address that is not an IPv4 or IPv6 literal.
  Status Listen();
  uint16_t port() const { return port_; }

  // Runs the event loops (this thread and threads - 1 more) until Stop() or a SHUTDOWN
  // request; returns when every loop has closed its connections.
  void Run();

  // Ends Run from any thread or a signal handler (one write to an eventfd).
  void Stop();
  bool shutdown_requested() const { return shutdown_requested_.load(); }

 private:
  void Loop();

  CommandHandler* const handler_;
  const ServerOptions options_;
  int listen_fd_ = -1;
  int stop_fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> shutdown_requested_{false};
  std::atomic<unsigned> clients_{0};
};

}  // namespace pmhash::serve
