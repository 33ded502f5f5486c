// Credentials, region and endpoint resolution (aws_config.h).
#include "remote/aws_config.h"

#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>

#include "dscache/error.h"
#include "remote/location.h"

namespace dscache {
namespace remote {

namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
}

std::optional<IniFile> read_ini(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream s;
  s << in.rdbuf();
  return parse_ini(s.str());
}

std::string home_file(const char* override_var, const char* name) {
  std::string path = env(override_var);
  if (!path.empty()) return path;
  return env("HOME") + "/.aws/" + name;
}

const std::map<std::string, std::string>* section(const std::optional<IniFile>& ini,
                                                  const std::string& name) {
  if (!ini) return nullptr;
  auto it = ini->find(name);
  return it == ini->end() ? nullptr : &it->second;
}

std::string value(const std::map<std::string, std::string>* sec, const std::string& key) {
  if (sec == nullptr) return "";
  auto it = sec->find(key);
  return it == sec->end() ? "" : it->second;
}

struct Profile {
  std::string name;
  bool named = false;  // chosen explicitly: its absence is an error, not anonymous access
  std::string credentials_path, config_path;
  const std::map<std::string, std::string>* credentials = nullptr;  // [NAME] in credentials
  const std::map<std::string, std::string>* config = nullptr;       // [profile NAME] in config
  std::optional<IniFile> credentials_file, config_file;
};

void load_profile(const RemoteOptions& options, Profile& p) {
  p.name = options.profile.empty() ? env("AWS_PROFILE") : options.profile;
  p.named = !p.name.empty();
  if (p.name.empty()) p.name = "default";
  p.credentials_path = home_file("AWS_SHARED_CREDENTIALS_FILE", "credentials");
  p.config_path = home_file("AWS_CONFIG_FILE", "config");
  p.credentials_file = read_ini(p.credentials_path);
  p.config_file = read_ini(p.config_path);
  p.credentials = section(p.credentials_file, p.name);
  p.config = section(p.config_file, "profile " + p.name);
  if (p.config == nullptr && p.name == "default") p.config = section(p.config_file, "default");
}

Credentials credentials_from(const Profile& p) {
  Credentials c;
  if (!env("AWS_ACCESS_KEY_ID").empty() && !env("AWS_SECRET_ACCESS_KEY").empty()) {
    c.access_key_id = env("AWS_ACCESS_KEY_ID");
    c.secret_access_key = env("AWS_SECRET_ACCESS_KEY");
    c.session_token = env("AWS_SESSION_TOKEN");
    c.source = "AWS_ACCESS_KEY_ID";
    return c;
  }
  // The credentials file first; the AWS CLI also accepts keys in the config file's profile.
  for (auto [sec, path] :
       {std::pair{p.credentials, &p.credentials_path}, std::pair{p.config, &p.config_path}}) {
    if (value(sec, "aws_access_key_id").empty()) continue;
    c.access_key_id = value(sec, "aws_access_key_id");
    c.secret_access_key = value(sec, "aws_secret_access_key");
    c.session_token = value(sec, "aws_session_token");
    c.source = "profile '" + p.name + "' in " + *path;
    return c;
  }
  return c;
}

std::string first_of(std::initializer_list<std::string> candidates) {
  for (const std::string& c : candidates) {
    if (!c.empty()) return c;
  }
  return "";
}

std::string checked_endpoint(const std::string& endpoint, const std::string& location) {
  Location parsed;
  try {
    parsed = parse_location(endpoint);
  } catch (const Error& e) {
    throw Error(ErrorKind::kInvalidArgument, location,
                "S3 endpoint '" + endpoint + "': " + e.reason());
  }
  if (parsed.scheme == Location::Scheme::kS3) {
    throw Error(ErrorKind::kInvalidArgument, location,
                "S3 endpoint '" + endpoint + "' must be http:// or https://");
  }
  return parsed.base;
}

bool virtual_addressing(const RemoteOptions& options, bool custom_endpoint,
                        const std::string& bucket, const std::string& location) {
  std::string style = first_of({options.addressing, env("AWS_S3_ADDRESSING_STYLE")});
  if (style == "path") return false;
  if (style == "virtual") return true;
  if (!style.empty() && style != "auto") {
    throw Error(ErrorKind::kInvalidArgument, location,
                "addressing '" + style +
                    "' (RemoteOptions::addressing or "
                    "AWS_S3_ADDRESSING_STYLE) is none of path, virtual, auto");
  }
  // A dotted bucket name would not match the endpoint's TLS certificate as a host name.
  return !custom_endpoint && bucket.find('.') == std::string::npos;
}

}  // namespace

std::string mask_key_id(const std::string& key_id) {
  if (key_id.size() <= 8) return "****";
  return key_id.substr(0, 4) + "..." + key_id.substr(key_id.size() - 4);
}

std::string Credentials::describe() const {
  if (!present()) return "no credentials (unsigned requests)";
  std::string s = "access key " + mask_key_id(access_key_id) + " from " + source;
  if (!session_token.empty()) s += " (with a session token)";
  return s;
}

IniFile parse_ini(const std::string& text) {
  IniFile ini;
  std::string current;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && (line[0] == ' ' || line[0] == '\t')) continue;
    std::string t = trim(line);
    if (t.empty() || t[0] == '#' || t[0] == ';') continue;
    if (t.front() == '[' && t.back() == ']') {
      current = trim(t.substr(1, t.size() - 2));
      ini[current];
      continue;
    }
    size_t eq = t.find('=');
    if (eq == std::string::npos) continue;
    ini[current][trim(t.substr(0, eq))] = trim(t.substr(eq + 1));
  }
  return ini;
}

S3Settings resolve_s3_settings(const RemoteOptions& options, const std::string& location,
                               const std::string& bucket) {
  Profile p;
  load_profile(options, p);
  if (p.named && p.credentials == nullptr && p.config == nullptr &&
      (env("AWS_ACCESS_KEY_ID").empty() || env("AWS_SECRET_ACCESS_KEY").empty())) {
    throw Error(ErrorKind::kInvalidArgument, location,
                "AWS profile '" + p.name + "' is in neither " + p.credentials_path + " nor " +
                    p.config_path);
  }
  S3Settings s;
  s.credentials = credentials_from(p);
  s.region = first_of({options.region, env("AWS_REGION"), env("AWS_DEFAULT_REGION"),
                       value(p.config, "region"), "us-east-1"});
  std::string endpoint = first_of({options.endpoint, env("AWS_ENDPOINT_URL_S3"),
                                   env("AWS_ENDPOINT_URL"), value(p.config, "endpoint_url")});
  bool custom = !endpoint.empty();
  if (!custom) endpoint = "https://s3." + s.region + ".amazonaws.com";
  s.endpoint = checked_endpoint(endpoint, location);
  s.virtual_host = virtual_addressing(options, custom, bucket, location);
  return s;
}

}  // namespace remote
}  // namespace dscache
