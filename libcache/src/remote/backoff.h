// When a failed request is tried again: which failures are worth it and how long to wait.
// Pure functions, unit-tested; http_client.cpp applies them.
#pragma once

#include <optional>
#include <string>

namespace dscache {
namespace remote {

// The first wait, its doubling cap, and the longest Retry-After honoured (a server asking for
// more would stall a training job for longer than its user would wait for a message).
constexpr double kBackoffFirstS = 0.2;
constexpr double kBackoffCapS = 10.0;
constexpr double kRetryAfterMaxS = 60.0;

// 429 (throttled) and 500/502/503/504 (the server or a proxy in front of it failed or is
// restarting): the same request may well succeed later. Other statuses are answers.
bool is_retryable_status(long status);

// The wait before retry number `retry` (0 for the first): "equal jitter" around a capped
// doubling, d = min(cap, first * 2^retry), uniformly in [d/2, d]; `unit` in [0, 1) is the random
// draw (a parameter so the bounds can be tested). Jitter keeps many workers that failed together
// from retrying together (429 storms).
double backoff_delay_s(int retry, double unit);

// A Retry-After header's delay in seconds (delta-seconds or an HTTP date, relative to `now`
// in seconds since the epoch), capped at kRetryAfterMaxS; nullopt when absent or unreadable.
std::optional<double> parse_retry_after(const std::string& value, double now);

}  // namespace remote
}  // namespace dscache
