#include "server/replicated_server.hpp"

#include <fmt/format.h>

#include <utility>

#include "fusee/error.hpp"
#include "http/cluster_json.hpp"

namespace fusee::server {

ReplicatedServer::ReplicatedServer(ReplicatedServerOptions options)
    : service_options_(std::move(options.service)),
      say_(service_options_.log),
      replica_id_(options.node.self),
      cluster_view_(options.node.addresses) {
  if (!say_) say_ = [](const std::string& line) { fmt::print(stderr, "fusee server: {}\n", line); };
  if (options.shards == 0) {
    // Every server must split the runs alike: a count from each machine's
    // CPUs would not.
    throw Error(errc::invalid_argument,
                "--replicated: --shards must be given, and the same on every server of the cluster");
  }
  // The view's log steps down before its service stops: nothing the
  // workers would write after it would be kept.
  service_options_.stop_checkpoint_wait = std::chrono::milliseconds(0);
  service_options_.log = say_;
  hosting::ViewHostOptions host;
  host.shards = options.shards;
  host.file_system = options.file_system;
  host.node = std::move(options.node);
  host.warn = say_;
  host.service.open = [this](hosting::ViewOpening opening) { open_service(std::move(opening)); };
  host.service.ended = [this]() -> std::function<void()> {
    // Its connections close: each worker reconnects to whichever server
    // leads next.
    return [this, ended = take_service()] {
      if (!ended) return;
      say_(fmt::format("the view ended: no longer serving workers on {}", ended->endpoint()));
      ended->stop();
    };
  };
  host.service.close = [this] {
    if (auto closing = take_service()) closing->stop();
  };
  host.service.serving = [this] {
    std::lock_guard lock(mu_);
    return service_ != nullptr;
  };
  host_ = std::make_unique<hosting::ViewHost>(std::move(host));
}

ReplicatedServer::~ReplicatedServer() { stop(); }

void ReplicatedServer::stop() {
  if (host_) host_->stop();
}

std::string ReplicatedServer::endpoint() const {
  std::lock_guard lock(mu_);
  return service_ ? service_->endpoint() : std::string();
}

std::shared_ptr<LogService> ReplicatedServer::take_service() {
  std::lock_guard lock(mu_);
  return std::exchange(service_, nullptr);
}

void ReplicatedServer::open_service(hosting::ViewOpening opening) {
  // On the host's thread, once the run store applied the view's log.
  LogServiceOver over;
  over.log = std::move(opening.log);
  over.store = std::move(opening.store);
  over.shards = opening.shards;
  over.keep_from = std::move(opening.bases.keep_from);
  over.epoch_floor = epoch_floor(opening.view);
  // The front's /metrics and /v1/cluster show the cluster, as an
  // application's replica's API does (the service stops before the host).
  over.replica = [this] { return hosting::replica_stats(host_.get(), replica_id_); };
  // The front's router must not block: the last answer, refreshed on a
  // thread of the view's own (asked once now, so it is there when the
  // console first asks).
  over.cluster = [this]() -> std::optional<std::string> {
    auto cluster = cluster_view_.latest(kClusterTimeout);
    if (!cluster) return std::nullopt;
    return boost::json::serialize(http::cluster_json(*cluster, replica_id_));
  };
  (void)cluster_view_.latest(kClusterTimeout);
  std::shared_ptr<LogService> opened = LogService::open_over(service_options_, std::move(over));
  say_(fmt::format("leading view {}: serving workers on {}{}", opening.view, opened->endpoint(),
                   opened->http_endpoint().empty() ? std::string() : ", HTTP on " + opened->http_endpoint()));
  std::lock_guard lock(mu_);
  service_ = std::move(opened);
}

}  // namespace fusee::server
