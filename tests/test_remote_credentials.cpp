// Credentials, region and endpoint resolution from the environment and from real ~/.aws files
// in a temporary HOME; and that no secret reaches credentials_used() or an error message.
#include <doctest/doctest.h>

#include <fstream>
#include <string>

#include "dscache/error.h"
#include "remote/aws_config.h"
#include "remote/object_store.h"
#include "scoped_env.h"
#include "temp_dir.h"

namespace {

using dscache::RemoteOptions;
using dscache::remote::resolve_s3_settings;
using dscache::remote::S3Settings;
using dscache::test::ScopedEnv;
using dscache::test::TempDir;

const char kSecret[] = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
const char kFileSecret[] = "fileSECRETfileSECRETfileSECRETfileSECRET";

void write(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

// Every AWS variable cleared and HOME a fresh directory with an empty ~/.aws: the machine's own
// configuration must not leak into a case.
struct CleanAwsEnv {
  TempDir home;
  ScopedEnv h{"HOME", home.path().c_str()};
  ScopedEnv e1{"AWS_ACCESS_KEY_ID", nullptr}, e2{"AWS_SECRET_ACCESS_KEY", nullptr},
      e3{"AWS_SESSION_TOKEN", nullptr}, e4{"AWS_PROFILE", nullptr},
      e5{"AWS_SHARED_CREDENTIALS_FILE", nullptr}, e6{"AWS_CONFIG_FILE", nullptr},
      e7{"AWS_REGION", nullptr}, e8{"AWS_DEFAULT_REGION", nullptr}, e9{"AWS_ENDPOINT_URL", nullptr},
      e10{"AWS_ENDPOINT_URL_S3", nullptr}, e11{"AWS_S3_ADDRESSING_STYLE", nullptr},
      e12{"DSCACHE_REMOTE_RETRIES", nullptr};
  CleanAwsEnv() { std::filesystem::create_directories(home.path() + "/.aws"); }
  std::string aws(const std::string& name) const { return home.path() + "/.aws/" + name; }
};

S3Settings resolve(const RemoteOptions& o = RemoteOptions{}) {
  return resolve_s3_settings(o, "s3://bucket/x", "bucket");
}

}  // namespace

TEST_CASE("credentials from the environment, with a session token; the secret never described") {
  CleanAwsEnv env;
  ScopedEnv id("AWS_ACCESS_KEY_ID", "AKIAIOSFODNN7EXAMPLE");
  ScopedEnv secret("AWS_SECRET_ACCESS_KEY", kSecret);
  ScopedEnv token("AWS_SESSION_TOKEN", "TOKEN123456789");
  S3Settings s = resolve();
  CHECK(s.credentials.access_key_id == "AKIAIOSFODNN7EXAMPLE");
  CHECK(s.credentials.secret_access_key == kSecret);
  CHECK(s.credentials.session_token == "TOKEN123456789");
  std::string d = s.credentials.describe();
  CHECK(d == "access key AKIA...MPLE from AWS_ACCESS_KEY_ID (with a session token)");
  CHECK(d.find(kSecret) == std::string::npos);
  CHECK(d.find("TOKEN123456789") == std::string::npos);
  // Defaults with nothing else set: us-east-1 on AWS, virtual-host addressing.
  CHECK(s.region == "us-east-1");
  CHECK(s.endpoint == "https://s3.us-east-1.amazonaws.com");
  CHECK(s.virtual_host);
}

TEST_CASE("a key id alone is not credentials; nothing at all is unsigned access") {
  CleanAwsEnv env;
  ScopedEnv id("AWS_ACCESS_KEY_ID", "AKIAIOSFODNN7EXAMPLE");
  S3Settings s = resolve();
  CHECK_FALSE(s.credentials.present());
  CHECK(s.credentials.describe() == "no credentials (unsigned requests)");
}

TEST_CASE("mask_key_id: first and last 4; short keys wholly hidden") {
  CHECK(dscache::remote::mask_key_id("AKIAIOSFODNN7EXAMPLE") == "AKIA...MPLE");
  CHECK(dscache::remote::mask_key_id("123456789") == "1234...6789");
  CHECK(dscache::remote::mask_key_id("12345678") == "****");
  CHECK(dscache::remote::mask_key_id("") == "****");
}

TEST_CASE("the default profile from ~/.aws/credentials and ~/.aws/config") {
  CleanAwsEnv env;
  write(env.aws("credentials"),
        "# comment\n[default]\naws_access_key_id = DEFAULTKEY0001\n"
        "aws_secret_access_key = " +
            std::string(kFileSecret) +
            "\n\n"
            "[ci]\naws_access_key_id=CIKEY00000000002\naws_secret_access_key=cisecret-cisecret\n"
            "aws_session_token = citoken\n");
  write(env.aws("config"),
        "[default]\nregion = eu-west-3\n"
        "[profile ci]\nregion=ap-south-1\nendpoint_url = http://127.0.0.1:7480\n"
        "s3 =\n  endpoint_url = http://nested.example:1\n");
  S3Settings s = resolve();
  CHECK(s.credentials.access_key_id == "DEFAULTKEY0001");
  CHECK(s.credentials.secret_access_key == kFileSecret);
  CHECK(s.credentials.session_token.empty());
  CHECK(s.credentials.describe() ==
        "access key DEFA...0001 from profile 'default' in " + env.aws("credentials"));
  CHECK(s.region == "eu-west-3");
  CHECK(s.endpoint == "https://s3.eu-west-3.amazonaws.com");

  SUBCASE("AWS_PROFILE picks [ci] and its [profile ci] config; nested keys ignored") {
    ScopedEnv p("AWS_PROFILE", "ci");
    S3Settings c = resolve();
    CHECK(c.credentials.access_key_id == "CIKEY00000000002");
    CHECK(c.credentials.session_token == "citoken");
    CHECK(c.region == "ap-south-1");
    CHECK(c.endpoint == "http://127.0.0.1:7480");
    CHECK_FALSE(c.virtual_host);  // a custom endpoint: path-style
  }
  SUBCASE("RemoteOptions::profile wins over AWS_PROFILE") {
    ScopedEnv p("AWS_PROFILE", "nonexistent");
    RemoteOptions o;
    o.profile = "ci";
    CHECK(resolve(o).credentials.access_key_id == "CIKEY00000000002");
  }
  SUBCASE("the environment's keys win over the files; region and endpoint variables too") {
    ScopedEnv id("AWS_ACCESS_KEY_ID", "ENVKEY0000000003");
    ScopedEnv secret("AWS_SECRET_ACCESS_KEY", kSecret);
    ScopedEnv r("AWS_DEFAULT_REGION", "us-west-2");
    ScopedEnv e("AWS_ENDPOINT_URL", "http://10.0.0.1:9000/");
    S3Settings c = resolve();
    CHECK(c.credentials.access_key_id == "ENVKEY0000000003");
    CHECK(c.region == "us-west-2");
    CHECK(c.endpoint == "http://10.0.0.1:9000");
    ScopedEnv r2("AWS_REGION", "ca-central-1");
    ScopedEnv e2("AWS_ENDPOINT_URL_S3", "https://s3.example.org");
    CHECK(resolve().region == "ca-central-1");
    CHECK(resolve().endpoint == "https://s3.example.org");
  }
  SUBCASE("options win over everything") {
    ScopedEnv r("AWS_REGION", "ca-central-1");
    RemoteOptions o;
    o.region = "sa-east-1";
    o.endpoint = "http://127.0.0.1:1234";
    o.addressing = "virtual";
    S3Settings c = resolve(o);
    CHECK(c.region == "sa-east-1");
    CHECK(c.endpoint == "http://127.0.0.1:1234");
    CHECK(c.virtual_host);
  }
}

TEST_CASE("AWS_SHARED_CREDENTIALS_FILE and AWS_CONFIG_FILE; keys in a config profile") {
  CleanAwsEnv env;
  write(env.home.file("creds"), "[other]\naws_access_key_id=X\n");
  write(env.home.file("cfg"),
        "[profile x]\naws_access_key_id = CONFIGKEY0000004\naws_secret_access_key = s3cr3t-s3cr3t\n"
        "region = eu-north-1\n");
  ScopedEnv c("AWS_SHARED_CREDENTIALS_FILE", env.home.file("creds").c_str());
  ScopedEnv g("AWS_CONFIG_FILE", env.home.file("cfg").c_str());
  ScopedEnv p("AWS_PROFILE", "x");
  S3Settings s = resolve();
  CHECK(s.credentials.access_key_id == "CONFIGKEY0000004");
  CHECK(s.credentials.describe() ==
        "access key CONF...0004 from profile 'x' in " + env.home.file("cfg"));
  CHECK(s.region == "eu-north-1");
}

TEST_CASE("a named profile that no file holds is an error naming both files") {
  CleanAwsEnv env;
  ScopedEnv p("AWS_PROFILE", "missing");
  try {
    resolve();
    FAIL("no error for a missing profile");
  } catch (const dscache::Error& e) {
    CHECK(e.kind() == dscache::ErrorKind::kInvalidArgument);
    CHECK(e.reason().find("'missing'") != std::string::npos);
    CHECK(e.reason().find(env.aws("credentials")) != std::string::npos);
  }
}

TEST_CASE("addressing: path for custom endpoints and dotted buckets; bad styles refused") {
  CleanAwsEnv env;
  CHECK(resolve_s3_settings({}, "s3://a.b.c", "a.b.c").virtual_host == false);
  ScopedEnv style("AWS_S3_ADDRESSING_STYLE", "path");
  CHECK_FALSE(resolve().virtual_host);
  RemoteOptions o;
  o.addressing = "sideways";
  CHECK_THROWS_AS(resolve(o), dscache::Error);
  o.addressing = "";
  o.endpoint = "ftp://host";
  CHECK_THROWS_AS(resolve(o), dscache::Error);
}

TEST_CASE("parse_ini: sections, comments, spaces, nested lines skipped") {
  auto ini = dscache::remote::parse_ini(
      "top=1\n[a]\n k = skipped\nx = 1 \n; c\n#c\n[ b ]\ny=2=3\nnoequals\n");
  CHECK(ini[""]["top"] == "1");
  CHECK(ini["a"].count("k") == 0);
  CHECK(ini["a"]["x"] == "1");
  CHECK(ini["b"]["y"] == "2=3");
  CHECK(ini["b"].size() == 1);
}

#if DSCACHE_HAVE_REMOTE
TEST_CASE("credentials_used() and an error never carry the secret") {
  CleanAwsEnv env;
  ScopedEnv id("AWS_ACCESS_KEY_ID", "AKIAIOSFODNN7EXAMPLE");
  ScopedEnv secret("AWS_SECRET_ACCESS_KEY", kSecret);
  RemoteOptions o;
  o.endpoint = "http://127.0.0.1:1";  // nothing listens on port 1: connection refused
  o.retries = 1;
  auto store = dscache::remote::ObjectStore::open("s3://bucket/p", o);
  CHECK(store->credentials_used() == "access key AKIA...MPLE from AWS_ACCESS_KEY_ID");
  CHECK(store->endpoint() == "http://127.0.0.1:1");
  try {
    store->get("key");
    FAIL("a GET from a closed port succeeded");
  } catch (const dscache::Error& e) {
    CHECK(e.kind() == dscache::ErrorKind::kRemote);
    CHECK(e.path() == "s3://bucket/p/key");
    CHECK(std::string(e.what()).find("http://127.0.0.1:1") != std::string::npos);
    CHECK(std::string(e.what()).find("after 2 attempts") != std::string::npos);
    CHECK(std::string(e.what()).find(kSecret) == std::string::npos);
  }
}
#else
TEST_CASE("without libcurl, open is Unsupported naming the location") {
  try {
    dscache::remote::ObjectStore::open("s3://bucket/p");
    FAIL("open succeeded without object storage support");
  } catch (const dscache::Error& e) {
    CHECK(e.kind() == dscache::ErrorKind::kUnsupported);
    CHECK(e.path() == "s3://bucket/p");
  }
}
#endif
