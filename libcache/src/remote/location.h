// Parsing of remote locations (s3://BUCKET[/PREFIX], http(s)://HOST[:PORT][/PATH]) and the
// URL encoding S3 and SigV4 need. Pure functions: no network, no environment.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace dscache {
namespace remote {

struct Location {
  enum class Scheme { kS3, kHttp, kHttps };
  Scheme scheme = Scheme::kS3;
  std::string bucket;  // s3 only
  std::string prefix;  // s3: key prefix without leading/trailing '/', "" for the whole bucket
  std::string base;    // http(s): "scheme://host[:port][/path]" without a trailing '/'
};

// Throws Error(kInvalidArgument, location, why) for anything else: an unknown scheme, a bucket
// name S3 refuses, credentials in the URL (they would be printed in messages), a query or
// fragment, a bad port.
Location parse_location(const std::string& location);

// S3 bucket naming rules (3-63 characters of a-z 0-9 . -, a letter or digit at both ends, no
// "..", not an IPv4 address): "" when `bucket` follows them, else why not.
std::string bucket_name_problem(const std::string& bucket);

// RFC 3986 percent-encoding as SigV4 wants it: unreserved characters (A-Z a-z 0-9 - . _ ~) kept,
// every other byte %XX (upper-case hex); '/' kept only when `keep_slash` (object keys in paths).
std::string uri_encode(const std::string& text, bool keep_slash);

// The query string of a request as SigV4 canonicalises it, since curl 7.88 signs the query as
// sent: each name and value encoded, '/' too, sorted by encoded name then value, "name=value"
// joined by '&' (a parameter without a value is still "name=").
std::string canonical_query(std::vector<std::pair<std::string, std::string>> params);

}  // namespace remote
}  // namespace dscache
