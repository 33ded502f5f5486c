// Retry policy of remote requests (backoff.h).
#include "remote/backoff.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <ctime>

namespace dscache {
namespace remote {

bool is_retryable_status(long status) {
  return status == 429 || status == 500 || status == 502 || status == 503 || status == 504;
}

double backoff_delay_s(int retry, double unit) {
  double d = kBackoffFirstS * std::pow(2.0, std::min(retry, 30));
  d = std::min(d, kBackoffCapS);
  unit = std::clamp(unit, 0.0, 1.0);
  return d / 2 + unit * d / 2;
}

std::optional<double> parse_retry_after(const std::string& value, double now) {
  size_t b = value.find_first_not_of(" \t");
  if (b == std::string::npos) return std::nullopt;
  size_t e = value.find_last_not_of(" \t\r\n");
  std::string v = value.substr(b, e - b + 1);
  if (std::all_of(v.begin(), v.end(), [](char c) { return std::isdigit((unsigned char)c); })) {
    if (v.size() > 9) return kRetryAfterMaxS;
    return std::min(static_cast<double>(std::stol(v)), kRetryAfterMaxS);
  }
  std::tm tm{};  // IMF-fixdate: "Sun, 06 Nov 1994 08:49:37 GMT"
  const char* end = ::strptime(v.c_str(), "%a, %d %b %Y %H:%M:%S GMT", &tm);
  if (end == nullptr || *end != '\0') return std::nullopt;
  double delay = static_cast<double>(::timegm(&tm)) - now;
  return std::clamp(delay, 0.0, kRetryAfterMaxS);
}

}  // namespace remote
}  // namespace dscache
