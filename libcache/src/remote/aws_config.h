// Where S3 requests go and what signs them: RemoteOptions, then the AWS environment variables,
// then the shared credentials and config files (~/.aws/credentials, ~/.aws/config), the same
// order the AWS CLI uses, so a machine set up for `aws s3` works unchanged.
#pragma once

#include <map>
#include <string>

#include "dscache/remote.h"

namespace dscache {
namespace remote {

// An access key pair. Holds the secret: never print it, never put it in an Error.
struct Credentials {
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;  // temporary credentials: sent as x-amz-security-token
  std::string source;         // "AWS_ACCESS_KEY_ID" or "profile 'ci' in /root/.aws/credentials"

  bool present() const { return !access_key_id.empty() && !secret_access_key.empty(); }
  // "access key AKIA...WXYZ from AWS_ACCESS_KEY_ID (with a session token)", or
  // "no credentials (unsigned requests)". Never the secret.
  std::string describe() const;
};

struct S3Settings {
  Credentials credentials;
  std::string region;         // for the signature's scope
  std::string endpoint;       // "scheme://host[:port]" without a trailing '/'
  bool virtual_host = false;  // https://BUCKET.host/KEY rather than https://host/BUCKET/KEY
};

// Resolves every field as dscache/remote.h documents. `location` names errors: a profile named
// explicitly (options or AWS_PROFILE) that neither file holds, an addressing style other than
// path/virtual/auto, an endpoint that is not http(s)://HOST[:PORT]: Error(kInvalidArgument).
S3Settings resolve_s3_settings(const RemoteOptions& options, const std::string& location,
                               const std::string& bucket);

// "AKIA...WXYZ": the first and last 4 characters, enough to tell keys apart in a message;
// "****" for a key of 8 characters or fewer (nothing of it would be hidden otherwise).
std::string mask_key_id(const std::string& key_id);

// An INI file as the AWS CLI reads it: section -> key -> value. Keys and section names are
// trimmed; '#' and ';' lines are comments; indented lines (nested settings such as "s3 =\n
// endpoint_url = ...") are skipped, since only top-level keys are read.
using IniFile = std::map<std::string, std::map<std::string, std::string>>;
IniFile parse_ini(const std::string& text);

}  // namespace remote
}  // namespace dscache
