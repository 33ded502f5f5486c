// Remote locations and URL encoding (location.h).
#include "remote/location.h"

#include <algorithm>
#include <cctype>

#include "dscache/error.h"

namespace dscache {
namespace remote {

namespace {

[[noreturn]] void bad(const std::string& location, const std::string& why) {
  throw Error(ErrorKind::kInvalidArgument, location, why);
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool has_control_char(const std::string& s) {
  return std::any_of(s.begin(), s.end(),
                     [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; });
}

std::string trim_slashes(const std::string& s) {
  size_t b = s.find_first_not_of('/');
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of('/');
  return s.substr(b, e - b + 1);
}

bool is_ipv4(const std::string& s) {
  int dots = 0;
  for (char c : s) {
    if (c == '.') {
      ++dots;
    } else if (!std::isdigit(static_cast<unsigned char>(c))) {
      return false;
    }
  }
  return dots == 3;
}

Location parse_s3(const std::string& location, const std::string& rest) {
  Location loc;
  loc.scheme = Location::Scheme::kS3;
  size_t slash = rest.find('/');
  loc.bucket = rest.substr(0, slash);
  if (std::string why = bucket_name_problem(loc.bucket); !why.empty()) {
    bad(location, "bucket name '" + loc.bucket + "' " + why);
  }
  if (slash != std::string::npos) loc.prefix = trim_slashes(rest.substr(slash));
  if (loc.prefix.find("//") != std::string::npos) bad(location, "empty path segment ('//')");
  return loc;
}

void check_host_port(const std::string& location, const std::string& authority) {
  if (authority.find('@') != std::string::npos) {
    bad(location, "credentials in the URL are not accepted (they would appear in messages)");
  }
  std::string host = authority;
  std::string port;
  if (!host.empty() && host[0] == '[') {  // [IPv6]:port
    size_t close = host.find(']');
    if (close == std::string::npos) bad(location, "unterminated '[' in the host");
    port = host.substr(close + 1);
    host = host.substr(0, close + 1);
    if (!port.empty() && port[0] != ':') bad(location, "junk after the IPv6 address");
    if (!port.empty()) port = port.substr(1);
  } else {
    if (size_t colon = host.find(':'); colon != std::string::npos) {
      port = host.substr(colon + 1);
      host = host.substr(0, colon);
    }
    for (char c : host) {
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != '_') {
        bad(location, "bad character in the host name");
      }
    }
  }
  if (host.empty()) bad(location, "no host");
  if (authority.find(':') != std::string::npos && host[0] != '[' && port.empty()) {
    bad(location, "empty port");
  }
  if (!port.empty()) {
    if (port.size() > 5 || !std::all_of(port.begin(), port.end(), ::isdigit) ||
        std::stoi(port) < 1 || std::stoi(port) > 65535) {
      bad(location, "port '" + port + "' is not a number from 1 to 65535");
    }
  }
}

Location parse_http(const std::string& location, const std::string& scheme,
                    const std::string& rest) {
  Location loc;
  loc.scheme = scheme == "https" ? Location::Scheme::kHttps : Location::Scheme::kHttp;
  if (rest.find_first_of("?#") != std::string::npos) {
    bad(location, "a query or fragment is not part of a location");
  }
  size_t slash = rest.find('/');
  std::string authority = rest.substr(0, slash);
  check_host_port(location, authority);
  std::string path = slash == std::string::npos ? "" : trim_slashes(rest.substr(slash));
  loc.base = scheme + "://" + authority + (path.empty() ? "" : "/" + path);
  return loc;
}

}  // namespace

std::string bucket_name_problem(const std::string& bucket) {
  if (bucket.size() < 3 || bucket.size() > 63) return "must be 3 to 63 characters long";
  for (char c : bucket) {
    if (!(std::islower(static_cast<unsigned char>(c)) ||
          std::isdigit(static_cast<unsigned char>(c)) || c == '.' || c == '-')) {
      return "may hold only a-z, 0-9, '.' and '-'";
    }
  }
  auto alnum = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; };
  if (!alnum(bucket.front()) || !alnum(bucket.back())) {
    return "must begin and end with a letter or digit";
  }
  if (bucket.find("..") != std::string::npos) return "may not hold '..'";
  if (is_ipv4(bucket)) return "may not be an IP address";
  return "";
}

Location parse_location(const std::string& location) {
  if (has_control_char(location)) bad(location, "control character in the location");
  size_t sep = location.find("://");
  if (sep == std::string::npos) bad(location, "not a remote location (s3://, http://, https://)");
  std::string scheme = lower(location.substr(0, sep));
  std::string rest = location.substr(sep + 3);
  if (scheme == "s3") return parse_s3(location, rest);
  if (scheme == "http" || scheme == "https") return parse_http(location, scheme, rest);
  bad(location, "unknown scheme '" + scheme + "' (s3://, http://, https://)");
}

std::string uri_encode(const std::string& text, bool keep_slash) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(text.size());
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~' ||
        (keep_slash && c == '/')) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

std::string canonical_query(std::vector<std::pair<std::string, std::string>> params) {
  for (auto& [name, value] : params) {
    name = uri_encode(name, false);
    value = uri_encode(value, false);
  }
  std::sort(params.begin(), params.end());
  std::string out;
  for (const auto& [name, value] : params) {
    if (!out.empty()) out += '&';
    out += name + "=" + value;
  }
  return out;
}

}  // namespace remote
}  // namespace dscache
