// Remote locations: what parses (and into what), what is refused and why, and the URL encoding
// SigV4 signs (curl 7.88 signs the query exactly as sent).
#include <doctest/doctest.h>

#include <string>

#include "dscache/error.h"
#include "dscache/remote.h"
#include "remote/location.h"

namespace {

using dscache::remote::canonical_query;
using dscache::remote::Location;
using dscache::remote::parse_location;
using dscache::remote::uri_encode;

// The reason an invalid location is refused with; "" when it parses.
std::string refusal(const std::string& location) {
  try {
    parse_location(location);
    return "";
  } catch (const dscache::Error& e) {
    CHECK(e.kind() == dscache::ErrorKind::kInvalidArgument);
    CHECK(e.path() == location);
    return e.reason();
  }
}

}  // namespace

TEST_CASE("is_remote_location: s3, http and https, any case; nothing else") {
  CHECK(dscache::is_remote_location("s3://bucket/x"));
  CHECK(dscache::is_remote_location("S3://bucket"));
  CHECK(dscache::is_remote_location("http://host/c"));
  CHECK(dscache::is_remote_location("HTTPS://host"));
  CHECK_FALSE(dscache::is_remote_location("/data/cache"));
  CHECK_FALSE(dscache::is_remote_location("s3:/bucket"));
  CHECK_FALSE(dscache::is_remote_location("file:///x"));
  CHECK_FALSE(dscache::is_remote_location("s3"));
}

TEST_CASE("remote options: set then read back, process-wide") {
  dscache::RemoteOptions o;
  o.endpoint = "http://127.0.0.1:7480";
  o.retries = 2;
  dscache::set_remote_options(o);
  CHECK(dscache::remote_options().endpoint == "http://127.0.0.1:7480");
  CHECK(dscache::remote_options().retries == 2);
  dscache::set_remote_options(dscache::RemoteOptions{});
  CHECK(dscache::remote_options().endpoint.empty());
  CHECK(dscache::remote_options().retries == -1);
}

TEST_CASE("s3 locations: bucket and prefix") {
  struct Case {
    const char* text;
    const char* bucket;
    const char* prefix;
  };
  const Case cases[] = {
      {"s3://my-bucket", "my-bucket", ""},         {"s3://my-bucket/", "my-bucket", ""},
      {"s3://my-bucket/a/b/", "my-bucket", "a/b"}, {"S3://b.c.d/cache", "b.c.d", "cache"},
      {"s3://abc/x y+z", "abc", "x y+z"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.text);
    Location loc = parse_location(c.text);
    CHECK(loc.scheme == Location::Scheme::kS3);
    CHECK(loc.bucket == c.bucket);
    CHECK(loc.prefix == c.prefix);
  }
}

TEST_CASE("http(s) locations: base URL without a trailing slash") {
  Location a = parse_location("http://127.0.0.1:8080/data/cache/");
  CHECK(a.scheme == Location::Scheme::kHttp);
  CHECK(a.base == "http://127.0.0.1:8080/data/cache");
  Location b = parse_location("HTTPS://example.com");
  CHECK(b.scheme == Location::Scheme::kHttps);
  CHECK(b.base == "https://example.com");
  CHECK(parse_location("http://[::1]:80/x").base == "http://[::1]:80/x");
}

TEST_CASE("bad locations are InvalidArgument naming the location and why") {
  struct Case {
    const char* text;
    const char* why;  // a piece of the reason
  };
  const Case cases[] = {
      {"s3://ab", "3 to 63"},
      {"s3://", "3 to 63"},
      {"s3://My-Bucket/x", "a-z"},
      {"s3://under_score", "a-z"},
      {"s3://-abc", "begin and end"},
      {"s3://abc-", "begin and end"},
      {"s3://a..b", "'..'"},
      {"s3://192.168.1.1", "IP address"},
      {"s3://bucket/a//b", "empty path segment"},
      {"ftp://host/x", "unknown scheme"},
      {"/local/path", "not a remote location"},
      {"http://user:secret@host/x", "credentials in the URL"},
      {"http://host/x?a=b", "query"},
      {"http:///x", "no host"},
      {"http://host:99999/x", "port"},
      {"http://host:/x", "empty port"},
      {"http://ho st/x", "bad character"},
      {"s3://bucket/a\nb", "control character"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.text);
    std::string why = refusal(c.text);
    CHECK(why.find(c.why) != std::string::npos);
  }
  // The refusal of credentials in a URL does not repeat them in its reason.
  CHECK(refusal("http://user:hunter2@host/x").find("hunter2") == std::string::npos);
}

TEST_CASE("uri_encode: unreserved kept, the rest %XX upper-case; '/' as asked") {
  CHECK(uri_encode("AZaz09-._~", false) == "AZaz09-._~");
  CHECK(uri_encode("a b/c+d=e&f", false) == "a%20b%2Fc%2Bd%3De%26f");
  CHECK(uri_encode("a b/c", true) == "a%20b/c");
  CHECK(uri_encode("\xC3\xA9", true) == "%C3%A9");
  CHECK(uri_encode("", false).empty());
}

TEST_CASE("canonical_query: sorted by encoded name, values encoded, '/' too, empty value kept") {
  CHECK(canonical_query({{"prefix", "a/b c"}, {"list-type", "2"}}) ==
        "list-type=2&prefix=a%2Fb%20c");
  CHECK(canonical_query({{"uploadId", "x/y+z"}, {"partNumber", "3"}}) ==
        "partNumber=3&uploadId=x%2Fy%2Bz");
  CHECK(canonical_query({{"uploads", ""}}) == "uploads=");
  // Upper-case sorts before lower-case (byte order), as SigV4 wants.
  CHECK(canonical_query({{"b", "1"}, {"B", "2"}, {"a", "3"}}) == "B=2&a=3&b=1");
  CHECK(canonical_query({{"continuation-token", "1/2=="}, {"list-type", "2"}, {"prefix", ""}}) ==
        "continuation-token=1%2F2%3D%3D&list-type=2&prefix=");
}
