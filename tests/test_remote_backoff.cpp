// The retry policy's pure parts: which statuses are retried, the backoff's bounds, Retry-After.
#include <doctest/doctest.h>

#include "remote/backoff.h"

namespace remote = dscache::remote;

TEST_CASE("retryable statuses: 429 and 500/502/503/504 only") {
  for (long s : {429L, 500L, 502L, 503L, 504L}) {
    CAPTURE(s);
    CHECK(remote::is_retryable_status(s));
  }
  for (long s : {200L, 206L, 301L, 400L, 401L, 403L, 404L, 416L, 501L, 505L}) {
    CAPTURE(s);
    CHECK_FALSE(remote::is_retryable_status(s));
  }
}

TEST_CASE("backoff: doubling from 0.2 s, capped at 10 s, jitter within [d/2, d]") {
  const double expected_cap[] = {0.2, 0.4, 0.8, 1.6, 3.2, 6.4, 10, 10, 10};
  for (int retry = 0; retry < 9; ++retry) {
    CAPTURE(retry);
    double d = expected_cap[retry];
    CHECK(remote::backoff_delay_s(retry, 0.0) == doctest::Approx(d / 2));
    CHECK(remote::backoff_delay_s(retry, 0.999999) == doctest::Approx(d).epsilon(1e-5));
    double mid = remote::backoff_delay_s(retry, 0.5);
    CHECK(mid > d / 2);
    CHECK(mid < d);
  }
  // Far-out retries stay at the cap instead of overflowing.
  CHECK(remote::backoff_delay_s(1000, 1.0) == doctest::Approx(10.0));
  CHECK(remote::backoff_delay_s(1000, 0.0) == doctest::Approx(5.0));
}

TEST_CASE("Retry-After: seconds or an HTTP date, capped; junk ignored") {
  CHECK(remote::parse_retry_after("3", 0).value() == doctest::Approx(3.0));
  CHECK(remote::parse_retry_after(" 0 ", 0).value() == doctest::Approx(0.0));
  CHECK(remote::parse_retry_after("3600", 0).value() == doctest::Approx(remote::kRetryAfterMaxS));
  CHECK(remote::parse_retry_after("99999999999999", 0).value() ==
        doctest::Approx(remote::kRetryAfterMaxS));
  // Sun, 06 Nov 1994 08:49:37 GMT is 784111777 s after the epoch.
  CHECK(remote::parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", 784111770).value() ==
        doctest::Approx(7.0));
  CHECK(remote::parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", 784111790).value() ==
        doctest::Approx(0.0));  // a date in the past: retry now
  CHECK_FALSE(remote::parse_retry_after("", 0).has_value());
  CHECK_FALSE(remote::parse_retry_after("soon", 0).has_value());
  CHECK_FALSE(remote::parse_retry_after("-5", 0).has_value());
}
