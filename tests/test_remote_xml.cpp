// The S3 XML the client reads: ListObjectsV2 pages (as radosgw and AWS write them), entities,
// error bodies; and the CompleteMultipartUpload body it writes.
#include <doctest/doctest.h>

#include <stdexcept>
#include <string>

#include "remote/s3_xml.h"

namespace remote = dscache::remote;

namespace {

// A page as radosgw 16 answers ListObjectsV2 (trimmed of nothing the parser reads).
const char kPage[] = R"(<?xml version="1.0" encoding="UTF-8"?>
<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>dscache-test</Name>
<Prefix>cache/</Prefix><MaxKeys>1000</MaxKeys><IsTruncated>true</IsTruncated>
<Contents><Key>cache/a&amp;b &lt;1&gt;.npy</Key><LastModified>2026-12-06T14:00:00.000Z</LastModified>
<ETag>&quot;9b2cf535f27731c974343645a3985328&quot;</ETag><Size>1234</Size>
<StorageClass>STANDARD</StorageClass><Owner><ID>u</ID><DisplayName>u</DisplayName></Owner>
<Type>Normal</Type></Contents>
<Contents><Key>cache/caf&#233; &#x1F600;</Key><ETag>"abc-2"</ETag><Size>0</Size></Contents>
<KeyCount>2</KeyCount><ContinuationToken>t0</ContinuationToken>
<NextContinuationToken>1/ab+c==</NextContinuationToken></ListBucketResult>)";

}  // namespace

TEST_CASE("a ListObjectsV2 page: keys decoded, sizes, ETags unquoted, the next token") {
  remote::ListPage page = remote::parse_list_page(kPage);
  REQUIRE(page.objects.size() == 2);
  CHECK(page.objects[0].key == "cache/a&b <1>.npy");
  CHECK(page.objects[0].size == 1234);
  CHECK(page.objects[0].etag == "9b2cf535f27731c974343645a3985328");
  CHECK(page.objects[1].key == "cache/caf\xC3\xA9 \xF0\x9F\x98\x80");
  CHECK(page.objects[1].size == 0);
  CHECK(page.objects[1].etag == "abc-2");
  CHECK(page.truncated);
  CHECK(page.next_token == "1/ab+c==");
}

TEST_CASE("the last page: not truncated; an empty listing") {
  remote::ListPage last = remote::parse_list_page(
      "<ListBucketResult><IsTruncated>false</IsTruncated><Contents><Key>k</Key><Size>5</Size>"
      "</Contents></ListBucketResult>");
  CHECK_FALSE(last.truncated);
  CHECK(last.objects.size() == 1);
  remote::ListPage empty = remote::parse_list_page(
      "<ListBucketResult><Name>b</Name><KeyCount>0</KeyCount><IsTruncated>false</IsTruncated>"
      "</ListBucketResult>");
  CHECK(empty.objects.empty());
  CHECK_FALSE(empty.truncated);
}

TEST_CASE("pages that cannot be followed are refused") {
  const char* bad[] = {
      "<Error><Code>AccessDenied</Code></Error>",
      "<ListBucketResult><Contents><Size>1</Size></Contents></ListBucketResult>",
      "<ListBucketResult><Contents><Key>k</Key><Size>-1</Size></Contents></ListBucketResult>",
      "<ListBucketResult><Contents><Key>k</Key><Size>12x</Size></Contents></ListBucketResult>",
      "<ListBucketResult><Contents><Key>k</Key></Contents></ListBucketResult>",
      "<ListBucketResult><IsTruncated>true</IsTruncated></ListBucketResult>",
  };
  for (const char* xml : bad) {
    CAPTURE(xml);
    CHECK_THROWS_AS(remote::parse_list_page(xml), std::runtime_error);
  }
}

TEST_CASE("elements: exact names, attributes, self-closing, all of them in order") {
  const std::string xml =
      "<R><KeyCount>2</KeyCount><Key a=\"1\">x</Key><Keys>no</Keys><Key/><Key>y</Key></R>";
  auto keys = remote::xml_elements(xml, "Key");
  REQUIRE(keys.size() == 3);
  CHECK(keys[0] == "x");
  CHECK(keys[1] == "");
  CHECK(keys[2] == "y");
  CHECK(remote::xml_first(xml, "KeyCount").value() == "2");
  CHECK_FALSE(remote::xml_first(xml, "Missing").has_value());
  CHECK_FALSE(remote::xml_first("<Key>unterminated", "Key").has_value());
}

TEST_CASE("entity decoding: the five named, decimal and hex, CDATA; junk kept as written") {
  CHECK(remote::xml_decode("&amp;&lt;&gt;&quot;&apos;") == "&<>\"'");
  CHECK(remote::xml_decode("&#65;&#x42;&#X43;") == "ABC");
  CHECK(remote::xml_decode("&#x20AC;") == "\xE2\x82\xAC");
  CHECK(remote::xml_decode("a<![CDATA[<b>&amp;]]>c") == "a<b>&amp;c");
  CHECK(remote::xml_decode("&nope; & &#; &#xZZ; &#0;") == "&nope; & &#; &#xZZ; &#0;");
  CHECK(remote::xml_decode("&amp;amp;") == "&amp;");  // decoded once, not twice
}

TEST_CASE("error bodies: Code and Message; anything else is no S3 error") {
  remote::S3ErrorBody e = remote::parse_error_body(
      "<?xml version=\"1.0\"?><Error><Code>SignatureDoesNotMatch</Code><Message>The request "
      "signature we calculated does not match</Message><RequestId>tx1</RequestId></Error>");
  CHECK(e.code == "SignatureDoesNotMatch");
  CHECK(e.message == "The request signature we calculated does not match");
  remote::S3ErrorBody none = remote::parse_error_body("<html>502 Bad Gateway</html>");
  CHECK(none.code.empty());
  CHECK(remote::parse_error_body("<Error><Code>A&amp;B</Code></Error>").code == "A&B");
}

TEST_CASE("CompleteMultipartUpload body: parts in order, ETags quoted and escaped") {
  std::string body = remote::complete_multipart_body({{1, "\"e1\""}, {2, "e2"}});
  CHECK(body ==
        "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>&quot;e1&quot;</ETag>"
        "</Part><Part><PartNumber>2</PartNumber><ETag>&quot;e2&quot;</ETag></Part>"
        "</CompleteMultipartUpload>");
  CHECK(remote::xml_escape("a&<>\"'") == "a&amp;&lt;&gt;&quot;&apos;");
  CHECK(remote::strip_quotes("\"x\"") == "x");
  CHECK(remote::strip_quotes("\"") == "\"");
}
