// An awakeable's token (Ctx::awakeable): what an outside system is given to
// complete it. "awk1.<run id, hex>.<position>.<secret>": the run id routes a
// completion to the run's shard (so a token survives resharding), the
// position names the command, and the secret -- 128 bits from the kernel's
// random source, journaled with the awakeable -- makes it unguessable: the
// engine compares it with the journal's before it records anything. Every
// character is URL-safe, so a token is a path segment as it is. Pure but
// for new_secret().
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace fusee::engine {

struct AwakeableToken {
  std::string run_id;
  std::uint32_t position = 0;
  std::string secret;  // 32 lower-case hex digits
};

std::string format_token(const AwakeableToken& token);
// Nothing for text that is not a token.
std::optional<AwakeableToken> parse_token(const std::string& text);

// 128 random bits as 32 hex digits (getrandom(2); the engine's configured
// random source feeds ctx.random() and a test's counting source, so it is
// not used for secrets).
std::string new_secret();

// Compares without an early exit, so timing tells nothing of the secret.
bool same_secret(const std::string& a, const std::string& b);

}  // namespace fusee::engine
