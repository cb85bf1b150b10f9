#include "replication/etcd_coordinator.hpp"

#include <openssl/evp.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <boost/json.hpp>
#include <string_view>

namespace fusee::replication {

namespace json = boost::json;
namespace http = boost::beast::http;
namespace net = boost::asio;

namespace {

// etcd's JSON carries keys and values in base64 (OpenSSL's codec).
std::string base64(std::string_view bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3), '\0');
  const int written = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                      reinterpret_cast<const unsigned char*>(bytes.data()),
                                      static_cast<int>(bytes.size()));
  out.resize(static_cast<std::size_t>(written));
  return out;
}

std::optional<std::string> unbase64(std::string_view text) {
  if (text.size() % 4 != 0) return std::nullopt;
  std::string out(3 * text.size() / 4, '\0');
  const int written = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                      reinterpret_cast<const unsigned char*>(text.data()),
                                      static_cast<int>(text.size()));
  if (written < 0) return std::nullopt;
  std::size_t padding = 0;
  if (!text.empty() && text.back() == '=') ++padding;
  if (text.size() > 1 && text[text.size() - 2] == '=') ++padding;
  out.resize(static_cast<std::size_t>(written) - padding);
  return out;
}

// etcd writes its 64-bit integers as JSON strings.
std::int64_t int_field(const json::object& object, std::string_view name) {
  const json::value* field = object.if_contains(name);
  if (field == nullptr) return 0;  // etcd omits zero values
  if (field->is_string()) return std::stoll(std::string(field->as_string()));
  if (field->is_int64()) return field->as_int64();
  if (field->is_uint64()) return static_cast<std::int64_t>(field->as_uint64());
  return 0;
}

std::error_code protocol_error() { return std::make_error_code(std::errc::protocol_error); }

}  // namespace

// --- The register's JSON ----------------------------------------------------

std::string register_json(const Register& reg) {
  json::array starts;
  for (const auto& [view, start] : reg.starts) starts.push_back(json::array{view, start});
  json::object object;
  object["view"] = reg.view;
  object["primary"] = reg.primary == kNoReplica ? json::value(nullptr) : json::value(reg.primary);
  object["normal"] = reg.normal;
  object["starts"] = std::move(starts);
  return json::serialize(object);
}

Result<Register> parse_register_json(const std::string& text) {
  boost::system::error_code error;
  json::value value = json::parse(text, error);
  if (error || !value.is_object()) return protocol_error();
  const json::object& object = value.as_object();
  Register reg;
  try {
    reg.view = json::value_to<View>(object.at("view"));
    const json::value& primary = object.at("primary");
    reg.primary = primary.is_null() ? kNoReplica : json::value_to<ReplicaId>(primary);
    reg.normal = object.at("normal").as_bool();
    for (const json::value& pair : object.at("starts").as_array()) {
      reg.starts[json::value_to<View>(pair.as_array().at(0))] = json::value_to<Seq>(pair.as_array().at(1));
    }
  } catch (const std::exception&) {
    return protocol_error();
  }
  return reg;
}

// --- HTTP: one connection kept alive, reopened after any error -------------

class EtcdCoordinator::Http {
 public:
  // `members`: etcd's members' HOST and PORT, the first tried first.
  Http(std::vector<std::pair<std::string, std::uint16_t>> members, std::chrono::milliseconds timeout)
      : members_(std::move(members)), timeout_(timeout) {}

  // POSTs a JSON body to an etcd gateway path and returns the JSON answer;
  // an error when etcd did not answer 200 within the timeout. A member that
  // cannot be reached is passed over for the next at once (nothing was
  // sent); after any other error the next call starts at the next member.
  Result<json::object> post(const std::string& path, const json::object& body) {
    boost::system::error_code error;
    json::object answer;
    io_.restart();
    for (std::size_t tried = 0; !stream_ && tried < members_.size(); ++tried) {
      if (tried > 0) at_ = (at_ + 1) % members_.size();
      error = {};
      stream_.emplace(io_);
      net::ip::tcp::resolver resolver(io_);
      auto endpoints = resolver.resolve(members_[at_].first, std::to_string(members_[at_].second), error);
      if (!error) {
        stream_->expires_after(timeout_);
        stream_->async_connect(endpoints, [&](boost::system::error_code e, const auto&) { error = e; });
        io_.run();
        io_.restart();
      }
      if (error) stream_.reset();
    }
    if (!stream_) return close(error);
    http::request<http::string_body> request{http::verb::post, path, 11};
    request.set(http::field::host, members_[at_].first);
    request.set(http::field::content_type, "application/json");
    request.body() = json::serialize(body);
    request.prepare_payload();
    http::response<http::string_body> response;
    stream_->expires_after(timeout_);
    http::async_write(*stream_, request, [&](boost::system::error_code e, std::size_t) {
      error = e;
      if (e) return;
      stream_->expires_after(timeout_);
      http::async_read(*stream_, buffer_, response, [&](boost::system::error_code e2, std::size_t) { error = e2; });
    });
    io_.run();
    if (error) return close(error);
    if (response.result() != http::status::ok) return close(protocol_error());
    json::value value = json::parse(response.body(), error);
    if (error || !value.is_object()) return close(protocol_error());
    if (!response.keep_alive()) stream_.reset();
    return std::move(value.as_object());
  }

 private:
  std::error_code close(boost::system::error_code error) {
    stream_.reset();
    buffer_.clear();
    at_ = (at_ + 1) % members_.size();  // the next call asks another member
    return error == boost::beast::error::timeout ? std::make_error_code(std::errc::timed_out) : std::error_code(error);
  }

  std::vector<std::pair<std::string, std::uint16_t>> members_;
  std::size_t at_ = 0;  // the member asked now
  std::chrono::milliseconds timeout_;
  net::io_context io_;
  std::optional<boost::beast::tcp_stream> stream_;
  boost::beast::flat_buffer buffer_;
};

// --- The calls -------------------------------------------------------------

// The register as etcd holds it, with the revision a transaction compares,
// and the primary key's.
struct EtcdCoordinator::Stored {
  Register reg;
  std::int64_t mod_revision = 0;  // 0: absent
  std::optional<ReplicaId> primary_key;
  std::int64_t primary_mod_revision = 0;
};

EtcdCoordinator::EtcdCoordinator(EtcdOptions options)
    : options_(std::move(options)),
      http_(std::make_unique<Http>(
          [&] {
            std::vector<std::pair<std::string, std::uint16_t>> members{{options_.host, options_.port}};
            members.insert(members.end(), options_.more.begin(), options_.more.end());
            return members;
          }(),
          options_.timeout)) {}

EtcdCoordinator::~EtcdCoordinator() = default;

std::string EtcdCoordinator::key(const char* name) const { return "/fusee/" + options_.cluster + "/" + name; }

Result<EtcdCoordinator::Stored> EtcdCoordinator::read_register() {
  // One transaction reads both keys at one revision (a range is
  // linearizable unless asked otherwise).
  json::object body;
  body["success"] = json::array{json::object{{"request_range", json::object{{"key", base64(key("register"))}}}},
                                json::object{{"request_range", json::object{{"key", base64(key("primary"))}}}}};
  json::object answer = FUSEE_TRY(http_->post("/v3/kv/txn", body));
  Stored stored;
  const json::value* responses = answer.if_contains("responses");
  if (responses == nullptr || !responses->is_array() || responses->as_array().size() != 2) return protocol_error();
  for (std::size_t i = 0; i < 2; ++i) {
    const json::object* range = responses->as_array()[i].as_object().if_contains("response_range")
                                    ? &responses->as_array()[i].as_object().at("response_range").as_object()
                                    : nullptr;
    if (range == nullptr) return protocol_error();
    const json::value* kvs = range->if_contains("kvs");
    if (kvs == nullptr || kvs->as_array().empty()) continue;
    const json::object& kv = kvs->as_array()[0].as_object();
    const auto value = unbase64(kv.contains("value") ? std::string_view(kv.at("value").as_string()) : "");
    if (!value) return protocol_error();
    if (i == 0) {
      stored.reg = FUSEE_TRY(parse_register_json(*value));
      stored.mod_revision = int_field(kv, "mod_revision");
    } else {
      try {
        stored.primary_key = static_cast<ReplicaId>(std::stoul(*value));
      } catch (const std::exception&) {
        return protocol_error();
      }
      stored.primary_mod_revision = int_field(kv, "mod_revision");
    }
  }
  return stored;
}

namespace {

json::object compare_mod(const std::string& key, std::int64_t mod_revision) {
  // An absent key has mod_revision 0, so one compare covers both.
  return {{"key", base64(key)}, {"target", "MOD"}, {"mod_revision", std::to_string(mod_revision)}, {"result", "EQUAL"}};
}

json::object put(const std::string& key, const std::string& value, std::optional<std::int64_t> lease = std::nullopt) {
  json::object request{{"key", base64(key)}, {"value", base64(value)}};
  if (lease) request["lease"] = std::to_string(*lease);
  return {{"request_put", std::move(request)}};
}

}  // namespace

auto EtcdCoordinator::campaign(ReplicaId caller, View view, Stored& stored) -> Result<Cas> {
  stored = FUSEE_TRY(read_register());
  // The view must be the next one, and no other replica's lease alive.
  if (stored.reg.view + 1 != view) return Cas::failed;
  if (stored.primary_key && *stored.primary_key != caller) return Cas::failed;
  json::object grant = FUSEE_TRY(http_->post("/v3/lease/grant", {{"TTL", std::to_string(options_.lease_ttl_seconds)}}));
  const std::int64_t lease = int_field(grant, "ID");
  if (lease == 0) return protocol_error();
  Register next = stored.reg;
  next.view = view;
  next.primary = caller;
  next.normal = false;
  json::object body;
  body["compare"] = json::array{compare_mod(key("register"), stored.mod_revision),
                                compare_mod(key("primary"), stored.primary_mod_revision)};
  body["success"] = json::array{put(key("register"), register_json(next)),
                                put(key("primary"), std::to_string(caller), lease)};
  json::object answer = FUSEE_TRY(http_->post("/v3/kv/txn", body));
  if (!answer.contains("succeeded")) {  // etcd omits false
    (void)http_->post("/v3/lease/revoke", {{"ID", std::to_string(lease)}});
    stored = FUSEE_TRY(read_register());
    return Cas::failed;
  }
  if (lease_ && *lease_ != lease) (void)http_->post("/v3/lease/revoke", {{"ID", std::to_string(*lease_)}});
  lease_ = lease;
  stored.reg = next;
  return Cas::succeeded;
}

auto EtcdCoordinator::publish_start(ReplicaId caller, View view, Seq start, Stored& stored) -> Result<Cas> {
  stored = FUSEE_TRY(read_register());
  const Register& reg = stored.reg;
  if (reg.view != view || reg.primary != caller) return Cas::failed;
  if (reg.normal) {
    // A retry of a transaction that applied though its answer was lost.
    const auto at = reg.starts.find(view);
    return at != reg.starts.end() && at->second == start ? Cas::succeeded : Cas::failed;
  }
  Register next = reg;
  next.normal = true;
  next.starts[view] = start;
  json::object body;
  body["compare"] = json::array{compare_mod(key("register"), stored.mod_revision)};
  body["success"] = json::array{put(key("register"), register_json(next))};
  json::object answer = FUSEE_TRY(http_->post("/v3/kv/txn", body));
  if (!answer.contains("succeeded")) {
    stored = FUSEE_TRY(read_register());
    return Cas::failed;
  }
  stored.reg = next;
  return Cas::succeeded;
}

auto EtcdCoordinator::keepalive(ReplicaId caller, View view, Stored& stored) -> Result<Cas> {
  stored = FUSEE_TRY(read_register());
  if (stored.reg.view != view || stored.reg.primary != caller || !lease_) return Cas::failed;
  json::object answer = FUSEE_TRY(http_->post("/v3/lease/keepalive", {{"ID", std::to_string(*lease_)}}));
  const json::value* result = answer.if_contains("result");
  if (result == nullptr || !result->is_object()) return protocol_error();
  if (int_field(result->as_object(), "TTL") > 0) return Cas::succeeded;
  // TTL 0 (omitted): the lease expired, and the primary key with it -- as
  // after an etcd outage longer than the TTL, through which this primary
  // served on (its backups heard it). If nobody campaigned meanwhile, it
  // takes the lease back rather than make the cluster elect again: the same
  // compare a campaign makes (the register unchanged, no primary key), so a
  // rival that campaigned first wins and this keepalive fails. Read again
  // first: etcd answers a renewal of an expired lease once its revocation
  // has applied, so the read before it may still show this primary's key.
  stored = FUSEE_TRY(read_register());
  if (stored.reg.view != view || stored.reg.primary != caller || stored.primary_key) return Cas::failed;
  json::object grant = FUSEE_TRY(http_->post("/v3/lease/grant", {{"TTL", std::to_string(options_.lease_ttl_seconds)}}));
  const std::int64_t lease = int_field(grant, "ID");
  if (lease == 0) return protocol_error();
  json::object body;
  body["compare"] = json::array{compare_mod(key("register"), stored.mod_revision),
                                compare_mod(key("primary"), stored.primary_mod_revision)};
  body["success"] = json::array{put(key("primary"), std::to_string(caller), lease)};
  json::object txn = FUSEE_TRY(http_->post("/v3/kv/txn", body));
  if (!txn.contains("succeeded")) {
    (void)http_->post("/v3/lease/revoke", {{"ID", std::to_string(lease)}});
    stored = FUSEE_TRY(read_register());
    return Cas::failed;
  }
  lease_ = lease;
  return Cas::succeeded;
}

void EtcdCoordinator::resign() {
  if (!lease_) return;
  (void)http_->post("/v3/lease/revoke", {{"ID", std::to_string(*lease_)}});
  lease_.reset();
}

CoordinatorAnswer EtcdCoordinator::run(ReplicaId caller, const CoordinatorCall& call) {
  CoordinatorAnswer answer;
  answer.id = call.id;
  Stored stored;
  Result<EtcdCoordinator::Cas> done = Cas::failed;
  switch (call.op) {
    case CoordinatorOp::read: {
      auto read = read_register();
      if (read) stored = std::move(*read);
      done = read ? Result<Cas>(Cas::succeeded) : Result<Cas>(read.error());
      break;
    }
    case CoordinatorOp::campaign: done = campaign(caller, call.view, stored); break;
    case CoordinatorOp::publish_start: done = publish_start(caller, call.view, call.start, stored); break;
    case CoordinatorOp::keepalive: done = keepalive(caller, call.view, stored); break;
    case CoordinatorOp::resign:
      resign();
      return answer;
  }
  if (!done) {  // not reached: it may have applied
    static constexpr const char* kNames[] = {"read", "campaign", "publish_start", "keepalive", "resign"};
    last_error_ = std::string("etcd ") + kNames[static_cast<int>(call.op)] + " at " + options_.host + ":" +
                  std::to_string(options_.port) + ": " + done.error().message();
    return answer;
  }
  last_error_.clear();
  answer.reached = true;
  answer.succeeded = *done == Cas::succeeded;
  answer.reg = std::move(stored.reg);
  return answer;
}

}  // namespace fusee::replication
