#include "serve/server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <thread>
#include <unordered_map>
#include <vector>

#include "serve/resp.h"

namespace pmhash::serve {
namespace {

// Requests of one connection answered before its loop turns to the others.
constexpr int kRequestsPerTurn = 256;
// Bytes read from one connection per turn.
constexpr size_t kReadPerTurn = 1u << 20;
// Unsent replies above this: the loop stops reading that connection until they drain.
constexpr size_t kOutputHighWater = 1u << 20;

using Clock = std::chrono::steady_clock;

struct Connection {
  Connection(int fd_in, const ServerOptions& o)
      : fd(fd_in), parser(o.max_request_bytes, o.max_args), last_active(Clock::now()) {}
  int fd;
  RespParser parser;
  Session session;
  std::string out;
  size_t out_sent = 0;
  Clock::time_point last_active;
  bool close_after_write = false;  // QUIT, a protocol error
  bool peer_closed = false;        // the peer shut its side: answer what came, then close
  uint32_t events = 0;             // the epoll interest registered now
};

std::string ErrnoText(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

}  // namespace

Server::Server(CommandHandler* handler, ServerOptions options)
    : handler_(handler), options_(std::move(options)) {}

Server::~Server() {
  if (listen_fd_ >= 0) ::close(listen_fd_);
  if (stop_fd_ >= 0) ::close(stop_fd_);
}

Status Server::Listen() {
  sockaddr_storage addr{};
  socklen_t addr_len = 0;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&addr);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&addr);
  if (::inet_pton(AF_INET, options_.bind.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(options_.port);
    addr_len = sizeof(sockaddr_in);
  } else if (::inet_pton(AF_INET6, options_.bind.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(options_.port);
    addr_len = sizeof(sockaddr_in6);
  } else {
    return Status::InvalidArgument("--bind " + options_.bind +
                                   ": not an IPv4 or IPv6 address (e.g. 127.0.0.1, ::1, "
                                   "0.0.0.0)");
  }
  const std::string where = options_.bind + ":" + std::to_string(options_.port);
  listen_fd_ = ::socket(addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) return Status::IOError(ErrnoText("socket"));
  const int one = 1;
  ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), addr_len) != 0) {
    return Status::IOError(ErrnoText(("cannot listen on " + where + ": bind").c_str()));
  }
  if (::listen(listen_fd_, 511) != 0) {
    return Status::IOError(ErrnoText(("cannot listen on " + where + ": listen").c_str()));
  }
  sockaddr_storage bound{};
  socklen_t bound_len = sizeof(bound);
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&bound), &bound_len);
  port_ = ntohs(bound.ss_family == AF_INET ? reinterpret_cast<sockaddr_in*>(&bound)->sin_port
                                           : reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port);
  stop_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (stop_fd_ < 0) return Status::IOError(ErrnoText("eventfd"));
  return Status::OK();
}

void Server::Stop() {
  const uint64_t one = 1;
  // Never read: the eventfd stays readable, so every loop sees it.
  [[maybe_unused]] ssize_t n = ::write(stop_fd_, &one, sizeof(one));
}

void Server::Run() {
  std::vector<std::thread> threads;
  for (unsigned i = 1; i < options_.threads; ++i) threads.emplace_back([this] { Loop(); });
  Loop();
  for (std::thread& t : threads) t.join();
}

void Server::Loop() {
  const int ep = ::epoll_create1(EPOLL_CLOEXEC);
  if (ep < 0) {
    Stop();
    return;
  }
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLEXCLUSIVE;
  ev.data.ptr = &listen_fd_;
  ::epoll_ctl(ep, EPOLL_CTL_ADD, listen_fd_, &ev);
  ev.events = EPOLLIN;
  ev.data.ptr = &stop_fd_;
  ::epoll_ctl(ep, EPOLL_CTL_ADD, stop_fd_, &ev);

  std::unordered_map<Connection*, std::unique_ptr<Connection>> conns;
  auto close_conn = [&](Connection* c) {
    ::epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, nullptr);
    ::close(c->fd);
    conns.erase(c);
    clients_.fetch_sub(1);
    handler_->connected_clients.fetch_sub(1, std::memory_order_relaxed);
  };
  // The interest a connection needs now: read unless it must close or its replies are
  // backed up; write while replies are unsent.
  auto update_interest = [&](Connection* c) {
    const size_t unsent = c->out.size() - c->out_sent;
    uint32_t want = 0;
    if (!c->close_after_write && !c->peer_closed && unsent < kOutputHighWater) want |= EPOLLIN;
    if (unsent > 0) want |= EPOLLOUT;
    if (want != c->events) {
      epoll_event e{};
      e.events = want;
      e.data.ptr = c;
      ::epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &e);
      c->events = want;
    }
  };
  // Sends what it can. False: the connection is gone (closed here).
  auto flush = [&](Connection* c) {
    while (c->out_sent < c->out.size()) {
      const ssize_t n = ::send(c->fd, c->out.data() + c->out_sent, c->out.size() - c->out_sent,
                               MSG_NOSIGNAL);
      if (n > 0) {
        c->out_sent += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      close_conn(c);  // the peer is gone
      return false;
    }
    if (c->out_sent == c->out.size()) {
      c->out.clear();
      c->out_sent = 0;
      if (c->close_after_write) {
        close_conn(c);
        return false;
      }
    } else if (c->out_sent > (64u << 10) && c->out_sent > c->out.size() / 2) {
      c->out.erase(0, c->out_sent);
      c->out_sent = 0;
    }
    if (c->out.size() - c->out_sent > options_.max_output_bytes) {
      close_conn(c);  // replies it does not read: the client output limit
      return false;
    }
    update_interest(c);
    return true;
  };
  // Runs the requests the connection's buffer holds, up to a turn's worth. True when it
  // stopped at the turn's limit with more possibly buffered.
  std::vector<std::string_view> args;
  auto run_requests = [&](Connection* c) {
    for (int i = 0; i < kRequestsPerTurn; ++i) {
      if (c->close_after_write || c->out.size() - c->out_sent >= kOutputHighWater) {
        return false;
      }
      const RespParser::Result r = c->parser.Next(&args);
      if (r == RespParser::Result::kIncomplete) {
        if (c->parser.pending_bytes() > options_.max_request_bytes) {
          AppendError(&c->out, "ERR Protocol error: request larger than " +
                                   std::to_string(options_.max_request_bytes) + " bytes");
          c->close_after_write = true;
        }
        // Nothing more will come after a half-close: what is left is an unfinished request.
        if (c->peer_closed) c->close_after_write = true;
        return false;
      }
      if (r == RespParser::Result::kError) {
        AppendError(&c->out, "ERR " + c->parser.error());
        c->close_after_write = true;
        return false;
      }
      const After after = handler_->Execute(args, &c->session, &c->out);
      if (after == After::kClose) c->close_after_write = true;
      if (after == After::kShutdown) {
        shutdown_requested_.store(true);
        Stop();
        c->close_after_write = true;
      }
    }
    return true;
  };
  // Connections stopped at a turn's limit: served again after the others' events.
  std::vector<Connection*> again, turn;
  auto serve = [&](Connection* c) {
    const bool more = run_requests(c);
    if (flush(c) && more) again.push_back(c);
  };

  std::vector<epoll_event> events(64);
  char buf[64 << 10];
  auto last_sweep = Clock::now();
  for (bool running = true; running;) {
    const int n = ::epoll_wait(ep, events.data(), static_cast<int>(events.size()),
                               again.empty() ? 1000 : 0);
    if (n < 0 && errno != EINTR) break;
    for (int i = 0; i < n; ++i) {
      void* tag = events[i].data.ptr;
      if (tag == &stop_fd_) {
        running = false;
        continue;
      }
      if (tag == &listen_fd_) {
        for (;;) {
          const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
          if (fd < 0) break;  // EAGAIN: another loop took it, or none is left
          handler_->connections_received.fetch_add(1, std::memory_order_relaxed);
          if (clients_.fetch_add(1) >= options_.max_clients) {
            clients_.fetch_sub(1);
            handler_->rejected_connections.fetch_add(1, std::memory_order_relaxed);
            static constexpr char kFull[] = "-ERR max number of clients reached\r\n";
            [[maybe_unused]] ssize_t w = ::send(fd, kFull, sizeof(kFull) - 1, MSG_NOSIGNAL);
            ::close(fd);
            continue;
          }
          handler_->connected_clients.fetch_add(1, std::memory_order_relaxed);
          const int one = 1;
          ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
          auto conn = std::make_unique<Connection>(fd, options_);
          Connection* c = conn.get();
          conns.emplace(c, std::move(conn));
          epoll_event e{};
          e.events = EPOLLIN;
          e.data.ptr = c;
          c->events = EPOLLIN;
          ::epoll_ctl(ep, EPOLL_CTL_ADD, fd, &e);
        }
        continue;
      }
      auto* c = static_cast<Connection*>(tag);
      if (conns.find(c) == conns.end()) continue;  // closed earlier in this batch
      c->last_active = Clock::now();
      if (events[i].events & EPOLLERR) {
        close_conn(c);
        continue;
      }
      if (events[i].events & (EPOLLIN | EPOLLHUP)) {
        for (size_t got = 0; got < kReadPerTurn;) {
          const ssize_t r = ::recv(c->fd, buf, sizeof(buf), 0);
          if (r > 0) {
            c->parser.Feed(std::string_view(buf, static_cast<size_t>(r)));
            got += static_cast<size_t>(r);
            continue;
          }
          if (r < 0 && errno == EINTR) continue;
          if (r == 0) c->peer_closed = true;
          break;
        }
      }
      serve(c);
    }
    // The connections that had more than a turn's worth, once each, in turn.
    turn.clear();
    turn.swap(again);
    std::sort(turn.begin(), turn.end());
    turn.erase(std::unique(turn.begin(), turn.end()), turn.end());
    for (Connection* c : turn) {
      if (conns.count(c)) serve(c);
    }
    const auto now = Clock::now();
    if (options_.idle_timeout_seconds > 0 && now - last_sweep >= std::chrono::seconds(1)) {
      last_sweep = now;
      const auto limit = std::chrono::seconds(options_.idle_timeout_seconds);
      std::vector<Connection*> idle;
      for (auto& [ptr, conn] : conns) {
        if (now - ptr->last_active > limit) idle.push_back(ptr);
      }
      for (Connection* c : idle) close_conn(c);
    }
  }
  std::vector<Connection*> all;
  for (auto& [ptr, conn] : conns) all.push_back(ptr);
  for (Connection* c : all) {
    flush(c);  // best effort: the replies of requests already run
    if (conns.count(c)) close_conn(c);
  }
  ::close(ep);
}

}  // namespace pmhash::serve
