// The commands of `pmhash serve` (docs/serve.md): each request (a RESP array of bulk
// strings) becomes calls of the public Index API and one RESP2 reply. No network here:
// the server (serve/server.h) feeds it requests and sends what it appends, and the unit
// tests drive it directly.
//
// Every write's reply is appended after the Index call returned, so a reply that says OK
// names a durable write (the Index contract). Keys and values are binary-safe; a key or
// value beyond the Index limits gets an error reply and changes nothing.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "pmhash/index.h"

namespace pmhash::serve {

struct CommandOptions {
  std::string requirepass;     // non-empty: every command but AUTH, QUIT, HELLO needs AUTH
  bool allow_flushall = false;  // FLUSHALL deletes every key (refused otherwise)
  size_t scan_max_count = 10000;  // SCAN's COUNT is capped here (one page, one reply)
};

// One client connection's state.
struct Session {
  bool authenticated = false;
};

// What the connection does after a command's reply is sent.
enum class After : uint8_t {
  kContinue,
  kClose,     // QUIT: send the reply, then close
  kShutdown,  // SHUTDOWN: send nothing more, close the server cleanly
};

class CommandHandler {
 public:
  // `index` must outlive the handler; it is shared by every thread that calls Execute.
  CommandHandler(Index* index, CommandOptions options);

  // Runs one request (args non-empty: the command name, then its arguments) and appends
  // its reply to *out. Thread-safe: any number of connections at once.
  After Execute(std::span<const std::string_view> args, Session* session, std::string* out);

  // Counters for INFO (the server adds to the connection figures).
  std::atomic<uint64_t> connections_received{0};
  std::atomic<uint64_t> connected_clients{0};
  std::atomic<uint64_t> rejected_connections{0};

 private:
  void Hello(std::span<const std::string_view> args, Session* session, std::string* out);
  void Get(std::span<const std::string_view> args, std::string* out);
  void Set(std::span<const std::string_view> args, std::string* out);
  void Del(std::span<const std::string_view> args, std::string* out);
  void Exists(std::span<const std::string_view> args, std::string* out);
  void MGet(std::span<const std::string_view> args, std::string* out);
  void MSet(std::span<const std::string_view> args, std::string* out);
  void Scan(std::span<const std::string_view> args, std::string* out);
  void Info(std::span<const std::string_view> args, std::string* out);
  void Command(std::span<const std::string_view> args, std::string* out);
  void FlushAll(std::string* out);

  Index* const index_;
  const CommandOptions options_;
  const std::chrono::steady_clock::time_point started_;
  std::atomic<uint64_t> commands_processed_{0};
};

}  // namespace pmhash::serve
