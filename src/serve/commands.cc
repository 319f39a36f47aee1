#include "serve/commands.h"

#include <charconv>
#include <cstdio>
#include <vector>

#include "serve/resp.h"

namespace pmhash::serve {
namespace {

// name, arity (Redis's convention: n = exactly n words with the name, -n = at least n),
// flags, first key, last key, key step: what COMMAND reports.
struct CommandSpec {
  const char* name;
  int arity;
  const char* flags;  // space-separated
  int first_key, last_key, step;
};

constexpr CommandSpec kCommands[] = {
    {"get", 2, "readonly fast", 1, 1, 1},
    {"set", -3, "write denyoom", 1, 1, 1},
    {"del", -2, "write", 1, -1, 1},
    {"exists", -2, "readonly fast", 1, -1, 1},
    {"mget", -2, "readonly fast", 1, -1, 1},
    {"mset", -3, "write denyoom", 1, -1, 2},
    {"dbsize", 1, "readonly fast", 0, 0, 0},
    {"scan", -2, "readonly", 0, 0, 0},
    {"ping", -1, "fast stale", 0, 0, 0},
    {"echo", 2, "fast", 0, 0, 0},
    {"info", -1, "stale", 0, 0, 0},
    {"command", -1, "stale", 0, 0, 0},
    {"select", 2, "fast", 0, 0, 0},
    {"auth", -2, "noscript fast no_auth", 0, 0, 0},
    {"hello", -1, "fast no_auth", 0, 0, 0},
    {"quit", -1, "fast no_auth", 0, 0, 0},
    {"shutdown", -1, "admin", 0, 0, 0},
    {"flushall", -1, "write", 0, 0, 0},
    {"config", -2, "admin", 0, 0, 0},
    {"client", -2, "admin", 0, 0, 0},
};

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    char x = a[i], y = b[i];
    if (x >= 'A' && x <= 'Z') x = static_cast<char>(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = static_cast<char>(y - 'A' + 'a');
    if (x != y) return false;
  }
  return true;
}

const CommandSpec* FindCommand(std::string_view name) {
  for (const CommandSpec& c : kCommands) {
    if (EqualsIgnoreCase(name, c.name)) return &c;
  }
  return nullptr;
}

// A printable form of a client's word for an error message: at most 64 bytes, bytes
// outside printable ASCII as '?'.
std::string Shown(std::string_view word) {
  std::string s;
  for (size_t i = 0; i < word.size() && i < 64; ++i) {
    const unsigned char c = static_cast<unsigned char>(word[i]);
    s.push_back(c >= 0x20 && c < 0x7f && c != '\'' ? static_cast<char>(c) : '?');
  }
  if (word.size() > 64) s += "...";
  return s;
}

void AppendStatusError(std::string* out, const Status& s) {
  AppendError(out, "ERR " + std::string(s.message()));
}

bool ParseUint(std::string_view text, uint64_t* value) {
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), *value);
  return ec == std::errc() && ptr == text.data() + text.size() && !text.empty();
}

}  // namespace

CommandHandler::CommandHandler(Index* index, CommandOptions options)
    : index_(index), options_(std::move(options)), started_(std::chrono::steady_clock::now()) {}

After CommandHandler::Execute(std::span<const std::string_view> args, Session* session,
                              std::string* out) {
  commands_processed_.fetch_add(1, std::memory_order_relaxed);
  const std::string_view name = args[0];
  const CommandSpec* spec = FindCommand(name);
  if (spec == nullptr) {
    std::string msg = "ERR unknown command '" + Shown(name) + "', with args beginning with:";
    for (size_t i = 1; i < args.size() && i < 4; ++i) msg += " '" + Shown(args[i]) + "'";
    AppendError(out, msg);
    return After::kContinue;
  }
  const bool arity_ok = spec->arity >= 0 ? args.size() == static_cast<size_t>(spec->arity)
                                         : args.size() >= static_cast<size_t>(-spec->arity);
  if (!arity_ok) {
    AppendError(out, std::string("ERR wrong number of arguments for '") + spec->name +
                         "' command");
    return After::kContinue;
  }
  const std::string_view cmd = spec->name;
  const bool no_auth = std::string_view(spec->flags).find("no_auth") != std::string_view::npos;
  if (!options_.requirepass.empty() && !session->authenticated && !no_auth) {
    AppendError(out, "NOAUTH Authentication required.");
    return After::kContinue;
  }
  if (cmd == "get") {
    Get(args, out);
  } else if (cmd == "set") {
    Set(args, out);
  } else if (cmd == "del") {
    Del(args, out);
  } else if (cmd == "exists") {
    Exists(args, out);
  } else if (cmd == "mget") {
    MGet(args, out);
  } else if (cmd == "mset") {
    MSet(args, out);
  } else if (cmd == "dbsize") {
    AppendInteger(out, static_cast<int64_t>(index_->Count()));
  } else if (cmd == "scan") {
    Scan(args, out);
  } else if (cmd == "ping") {
    if (args.size() > 2) {
      AppendError(out, "ERR wrong number of arguments for 'ping' command");
    } else if (args.size() == 2) {
      AppendBulk(out, args[1]);
    } else {
      AppendSimple(out, "PONG");
    }
  } else if (cmd == "echo") {
    AppendBulk(out, args[1]);
  } else if (cmd == "info") {
    Info(args, out);
  } else if (cmd == "command") {
    Command(args, out);
  } else if (cmd == "select") {
    if (args[1] == "0") {
      AppendSimple(out, "OK");
    } else {
      AppendError(out, "ERR DB index is out of range (pmhash serves one database, 0)");
    }
  } else if (cmd == "auth") {
    if (args.size() > 3) {
      AppendError(out, "ERR syntax error");
    } else if (options_.requirepass.empty()) {
      AppendError(out, "ERR AUTH <password> called without any password configured for the "
                       "default user. Are you sure your configuration is correct?");
    } else if ((args.size() == 3 && args[1] != "default") ||
               args.back() != options_.requirepass) {
      AppendError(out, "WRONGPASS invalid username-password pair or user is disabled.");
    } else {
      session->authenticated = true;
      AppendSimple(out, "OK");
    }
  } else if (cmd == "hello") {
    Hello(args, session, out);
  } else if (cmd == "quit") {
    AppendSimple(out, "OK");
    return After::kClose;
  } else if (cmd == "shutdown") {
    for (size_t i = 1; i < args.size(); ++i) {
      if (!EqualsIgnoreCase(args[i], "nosave") && !EqualsIgnoreCase(args[i], "save") &&
          !EqualsIgnoreCase(args[i], "now") && !EqualsIgnoreCase(args[i], "force")) {
        AppendError(out, "ERR syntax error");
        return After::kContinue;
      }
    }
    return After::kShutdown;
  } else if (cmd == "flushall") {
    FlushAll(out);
  } else if (cmd == "config") {
    // redis-benchmark asks CONFIG GET save and appendonly and prints them: no snapshots
    // and no append-only file here (each write is durable in the pool before its reply).
    if (EqualsIgnoreCase(args[1], "get") && args.size() == 3) {
      if (EqualsIgnoreCase(args[2], "save") || EqualsIgnoreCase(args[2], "appendonly")) {
        AppendArrayHeader(out, 2);
        AppendBulk(out, EqualsIgnoreCase(args[2], "save") ? "save" : "appendonly");
        AppendBulk(out, EqualsIgnoreCase(args[2], "save") ? "" : "no");
      } else {
        AppendArrayHeader(out, 0);
      }
    } else {
      AppendError(out, "ERR pmhash serve has no run-time configuration (CONFIG GET answers "
                       "an empty list)");
    }
  } else if (cmd == "client") {
    // Client libraries name themselves (CLIENT SETNAME, SETINFO): accepted, not kept.
    if (EqualsIgnoreCase(args[1], "setname") || EqualsIgnoreCase(args[1], "setinfo")) {
      AppendSimple(out, "OK");
    } else {
      AppendError(out, "ERR CLIENT " + Shown(args[1]) + " is not supported");
    }
  }
  return After::kContinue;
}

// HELLO [2 [AUTH user pass] [SETNAME name]]: RESP2 only (3 gets -NOPROTO); the reply is
// Redis's server map as a flat array, as in RESP2.
void CommandHandler::Hello(std::span<const std::string_view> args, Session* session,
                           std::string* out) {
  size_t i = 1;
  if (args.size() > 1) {
    if (args[1] != "2") {
      AppendError(out, "NOPROTO unsupported protocol version: pmhash serve speaks RESP2 only");
      return;
    }
    i = 2;
  }
  bool authenticated = session->authenticated;
  for (; i < args.size(); ++i) {
    if (EqualsIgnoreCase(args[i], "auth") && i + 2 < args.size()) {
      if (options_.requirepass.empty() || args[i + 1] != "default" ||
          args[i + 2] != options_.requirepass) {
        AppendError(out, "WRONGPASS invalid username-password pair or user is disabled.");
        return;
      }
      authenticated = true;
      i += 2;
    } else if (EqualsIgnoreCase(args[i], "setname") && i + 1 < args.size()) {
      ++i;  // client names are accepted, not kept
    } else {
      AppendError(out, "ERR syntax error in HELLO option '" + Shown(args[i]) + "'");
      return;
    }
  }
  if (!options_.requirepass.empty() && !authenticated) {
    AppendError(out, "NOAUTH HELLO must be called with the client already authenticated, "
                     "otherwise the HELLO AUTH <user> <pass> option can be used");
    return;
  }
  session->authenticated = authenticated;
  AppendArrayHeader(out, 14);
  AppendBulk(out, "server");
  AppendBulk(out, "pmhash");
  AppendBulk(out, "version");
  AppendBulk(out, "7.0.0-pmhash");
  AppendBulk(out, "proto");
  AppendInteger(out, 2);
  AppendBulk(out, "id");
  AppendInteger(out, 0);
  AppendBulk(out, "mode");
  AppendBulk(out, "standalone");
  AppendBulk(out, "role");
  AppendBulk(out, "master");
  AppendBulk(out, "modules");
  AppendArrayHeader(out, 0);
}

void CommandHandler::Get(std::span<const std::string_view> args, std::string* out) {
  std::string value;
  const Status s = index_->Get(args[1], &value);
  if (s.ok()) {
    AppendBulk(out, value);
  } else if (s.IsNotFound()) {
    AppendNull(out);
  } else {
    AppendStatusError(out, s);
  }
}

void CommandHandler::Set(std::span<const std::string_view> args, std::string* out) {
  bool nx = false, xx = false;
  for (size_t i = 3; i < args.size(); ++i) {
    const std::string_view o = args[i];
    if (EqualsIgnoreCase(o, "nx")) {
      nx = true;
    } else if (EqualsIgnoreCase(o, "xx")) {
      xx = true;
    } else if (EqualsIgnoreCase(o, "keepttl")) {
      // No key has a time to live: keeping it changes nothing.
    } else if (EqualsIgnoreCase(o, "ex") || EqualsIgnoreCase(o, "px") ||
               EqualsIgnoreCase(o, "exat") || EqualsIgnoreCase(o, "pxat")) {
      AppendError(out, "ERR SET " + Shown(o) + ": keys do not expire in pmhash (no EX, PX, "
                       "EXAT or PXAT); the key was not set");
      return;
    } else if (EqualsIgnoreCase(o, "get")) {
      AppendError(out, "ERR SET GET is not supported (it would not be atomic here); the key "
                       "was not set");
      return;
    } else {
      AppendError(out, "ERR syntax error");
      return;
    }
  }
  if (nx && xx) {
    AppendError(out, "ERR syntax error");
    return;
  }
  const Status s = nx   ? index_->Insert(args[1], args[2])
                   : xx ? index_->Update(args[1], args[2])
                        : index_->Put(args[1], args[2]);
  if (s.ok()) {
    AppendSimple(out, "OK");
  } else if ((nx && s.IsAlreadyExists()) || (xx && s.IsNotFound())) {
    AppendNull(out);  // the condition did not hold: nothing was set
  } else {
    AppendStatusError(out, s);
  }
}

void CommandHandler::Del(std::span<const std::string_view> args, std::string* out) {
  int64_t deleted = 0;
  for (size_t i = 1; i < args.size(); ++i) {
    const Status s = index_->Delete(args[i]);
    if (s.ok()) {
      ++deleted;
    } else if (!s.IsNotFound()) {
      // The keys before it are deleted (and durable); the error says where it stopped.
      AppendError(out, "ERR " + std::string(s.message()) + " (deleting key " +
                           std::to_string(i) + " of " + std::to_string(args.size() - 1) +
                           "; " + std::to_string(deleted) + " deleted before it)");
      return;
    }
  }
  AppendInteger(out, deleted);
}

void CommandHandler::Exists(std::span<const std::string_view> args, std::string* out) {
  int64_t found = 0;
  std::string value;
  for (size_t i = 1; i < args.size(); ++i) {
    const Status s = index_->Get(args[i], &value);
    if (s.ok()) {
      ++found;
    } else if (!s.IsNotFound()) {
      AppendStatusError(out, s);
      return;
    }
  }
  AppendInteger(out, found);
}

void CommandHandler::MGet(std::span<const std::string_view> args, std::string* out) {
  const std::span<const std::string_view> keys = args.subspan(1);
  std::vector<std::string> values(keys.size());
  std::vector<Status> statuses(keys.size());
  index_->MultiGet(keys, values, statuses);
  // An error for one key (a key too long) is an error reply for the whole MGET, as a
  // reply array cannot hold an error Redis clients expect there.
  for (const Status& s : statuses) {
    if (!s.ok() && !s.IsNotFound()) {
      AppendStatusError(out, s);
      return;
    }
  }
  AppendArrayHeader(out, keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    if (statuses[i].ok()) {
      AppendBulk(out, values[i]);
    } else {
      AppendNull(out);
    }
  }
}

void CommandHandler::MSet(std::span<const std::string_view> args, std::string* out) {
  if ((args.size() - 1) % 2 != 0) {
    AppendError(out, "ERR wrong number of arguments for 'mset' command");
    return;
  }
  std::vector<WriteOp> ops((args.size() - 1) / 2);
  for (size_t i = 0; i < ops.size(); ++i) {
    ops[i] = {WriteOp::Kind::kPut, args[1 + 2 * i], args[2 + 2 * i]};
  }
  std::vector<Status> statuses(ops.size());
  index_->Write(ops, statuses);
  size_t applied = 0;
  for (const Status& s : statuses) {
    if (!s.ok()) {
      AppendError(out, "ERR " + std::string(s.message()) + " (MSET pair " +
                           std::to_string(applied + 1) + " of " + std::to_string(ops.size()) +
                           "; the pairs are written one by one, not as a transaction: see "
                           "docs/serve.md)");
      return;
    }
    ++applied;
  }
  AppendSimple(out, "OK");
}

void CommandHandler::Scan(std::span<const std::string_view> args, std::string* out) {
  uint64_t cursor = 0;
  if (!ParseUint(args[1], &cursor)) {
    AppendError(out, "ERR invalid cursor");
    return;
  }
  uint64_t count = 10;
  for (size_t i = 2; i < args.size(); i += 2) {
    if (i + 1 >= args.size()) {
      AppendError(out, "ERR syntax error");
      return;
    }
    if (EqualsIgnoreCase(args[i], "count")) {
      if (!ParseUint(args[i + 1], &count) || count == 0) {
        AppendError(out, "ERR value is not an integer or out of range");
        return;
      }
    } else if (EqualsIgnoreCase(args[i], "type")) {
      if (!EqualsIgnoreCase(args[i + 1], "string")) {
        AppendError(out, "ERR SCAN TYPE: every key here is a string");
        return;
      }
    } else if (EqualsIgnoreCase(args[i], "match")) {
      AppendError(out, "ERR SCAN MATCH is not supported: filter the keys in the client");
      return;
    } else {
      AppendError(out, "ERR syntax error");
      return;
    }
  }
  if (count > options_.scan_max_count) count = options_.scan_max_count;
  std::vector<std::string> keys;
  uint64_t next = 0;
  const Status s = index_->Scan(
      cursor, count,
      [&](std::string_view key, std::string_view) {
        keys.emplace_back(key);
        return true;
      },
      &next);
  if (!s.ok()) {
    AppendError(out, s.IsInvalidArgument() ? "ERR invalid cursor" : "ERR " + std::string(s.message()));
    return;
  }
  AppendArrayHeader(out, 2);
  AppendBulk(out, std::to_string(next));
  AppendArrayHeader(out, keys.size());
  for (const std::string& k : keys) AppendBulk(out, k);
}

void CommandHandler::Info(std::span<const std::string_view> args, std::string* out) {
  const IndexStats st = index_->Stats();
  const double uptime =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  std::string text;
  auto line = [&](const char* key, const std::string& value) {
    text += key;
    text += ':';
    text += value;
    text += "\r\n";
  };
  auto num = [](double v) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%.4f", v);
    return std::string(buf);
  };
  const bool all = args.size() == 1;
  auto want = [&](const char* section) {
    if (all) return true;
    for (size_t i = 1; i < args.size(); ++i) {
      if (EqualsIgnoreCase(args[i], section) || EqualsIgnoreCase(args[i], "all") ||
          EqualsIgnoreCase(args[i], "everything")) {
        return true;
      }
    }
    return false;
  };
  if (want("server")) {
    text += "# Server\r\n";
    line("pmhash_engine", st.engine);
    line("redis_version", "7.0.0-pmhash");
    line("uptime_in_seconds", std::to_string(static_cast<uint64_t>(uptime)));
    text += "\r\n";
  }
  if (want("clients")) {
    text += "# Clients\r\n";
    line("connected_clients", std::to_string(connected_clients.load()));
    text += "\r\n";
  }
  if (want("stats")) {
    text += "# Stats\r\n";
    line("total_connections_received", std::to_string(connections_received.load()));
    line("total_commands_processed", std::to_string(commands_processed_.load()));
    line("rejected_connections", std::to_string(rejected_connections.load()));
    text += "\r\n";
  }
  if (want("persistence")) {
    text += "# Persistence\r\n";
    line("mapping", st.mapping);
    line("recovered", st.recovered ? "1" : "0");
    line("recovery_ms", num(st.recovery_ms));
    line("counters", st.counted ? "on" : "off");  // off: the four below are 0
    line("flushes", std::to_string(st.persist.flushes));
    line("fences", std::to_string(st.persist.fences));
    line("pm_bytes_stored", std::to_string(st.persist.bytes_stored));
    line("pm_lines_read", std::to_string(st.persist.lines_read));
    text += "\r\n";
  }
  if (want("keyspace")) {
    text += "# Keyspace\r\n";
    line("db0", "keys=" + std::to_string(st.count) + ",expires=0,avg_ttl=0");
    text += "\r\n";
  }
  if (want("pmhash")) {
    text += "# Pmhash\r\n";
    line("keys", std::to_string(st.count));
    line("key_slots", std::to_string(st.key_slots));
    line("load_factor", num(st.load_factor));
    line("pm_bytes", std::to_string(st.pm_bytes));
    line("pool_bytes", std::to_string(st.pool_bytes));
    line("dram_bytes", std::to_string(st.dram_bytes));
    text += "\r\n";
  }
  AppendBulk(out, text);
}

void CommandHandler::Command(std::span<const std::string_view> args, std::string* out) {
  auto append_spec = [out](const CommandSpec& c) {
    AppendArrayHeader(out, 6);
    AppendBulk(out, c.name);
    AppendInteger(out, c.arity);
    std::vector<std::string_view> flags;
    for (std::string_view f = c.flags; !f.empty();) {
      const size_t sp = f.find(' ');
      flags.push_back(f.substr(0, sp));
      f = sp == std::string_view::npos ? std::string_view() : f.substr(sp + 1);
    }
    AppendArrayHeader(out, flags.size());
    for (std::string_view f : flags) AppendSimple(out, f);
    AppendInteger(out, c.first_key);
    AppendInteger(out, c.last_key);
    AppendInteger(out, c.step);
  };
  if (args.size() == 1) {
    AppendArrayHeader(out, std::size(kCommands));
    for (const CommandSpec& c : kCommands) append_spec(c);
  } else if (EqualsIgnoreCase(args[1], "count")) {
    AppendInteger(out, static_cast<int64_t>(std::size(kCommands)));
  } else if (EqualsIgnoreCase(args[1], "docs")) {
    AppendArrayHeader(out, 0);  // redis-cli's hints: none
  } else if (EqualsIgnoreCase(args[1], "info")) {
    AppendArrayHeader(out, args.size() - 2);
    for (size_t i = 2; i < args.size(); ++i) {
      if (const CommandSpec* c = FindCommand(args[i])) {
        append_spec(*c);
      } else {
        out->append("*-1\r\n");
      }
    }
  } else {
    AppendError(out, "ERR COMMAND " + Shown(args[1]) + " is not supported (COMMAND, COMMAND "
                     "COUNT, COMMAND INFO, COMMAND DOCS are)");
  }
}

void CommandHandler::FlushAll(std::string* out) {
  if (!options_.allow_flushall) {
    AppendError(out, "ERR FLUSHALL is refused: start pmhash serve with --allow-flushall to "
                     "allow deleting every key");
    return;
  }
  // Page by page: each page's keys deleted before the next page is read.
  std::vector<std::string> keys;
  for (uint64_t cursor = 0;;) {
    keys.clear();
    uint64_t next = 0;
    Status s = index_->Scan(
        cursor, 1024,
        [&](std::string_view key, std::string_view) {
          keys.emplace_back(key);
          return true;
        },
        &next);
    for (size_t i = 0; s.ok() && i < keys.size(); ++i) {
      s = index_->Delete(keys[i]);
      if (s.IsNotFound()) s = Status::OK();  // deleted meanwhile by another client
    }
    if (!s.ok()) {
      AppendStatusError(out, s);
      return;
    }
    if (next == 0) break;
    cursor = next;
  }
  AppendSimple(out, "OK");
}

}  // namespace pmhash::serve
