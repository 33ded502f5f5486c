// The few S3 XML documents dscache reads and writes: ListObjectsV2 pages, the UploadId of
// CreateMultipartUpload, CompleteMultipartUpload's body, and error bodies. A small parser for
// these flat documents (no DTDs, no namespaces needed), with entity decoding.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace dscache {
namespace remote {

// The decoded text of every <tag>...</tag> (or <tag attr="..."> ... </tag>, or <tag/> as "")
// in `xml`, in order; the name must match exactly (<Key> is not <KeyCount>). Same-named
// elements must not nest, which holds for every document here.
std::vector<std::string> xml_elements(const std::string& xml, const std::string& tag);
// The first of them, raw (not decoded): for elements that hold other elements.
std::optional<std::string> xml_first_raw(const std::string& xml, const std::string& tag);
// The decoded text of the first of them, nullopt when there is none.
std::optional<std::string> xml_first(const std::string& xml, const std::string& tag);

// &amp; &lt; &gt; &quot; &apos; &#NN; &#xHH; (to UTF-8) and <![CDATA[...]]> sections; an
// unknown or malformed entity is kept as written.
std::string xml_decode(const std::string& text);
// The reverse for element text: & < > " ' escaped.
std::string xml_escape(const std::string& text);

struct ListedObject {
  std::string key;  // the full key, as the server sent it (decoded)
  uint64_t size = 0;
  std::string etag;  // quotes removed
};
struct ListPage {
  std::vector<ListedObject> objects;
  bool truncated = false;
  std::string next_token;  // NextContinuationToken when truncated
};
// One ListObjectsV2 page. Throws std::runtime_error on a page that is not one (no
// ListBucketResult, a Contents without Key, a Size that is not a number, truncated without a
// token: following it would list the same page forever).
ListPage parse_list_page(const std::string& xml);

struct S3ErrorBody {
  std::string code;  // "SignatureDoesNotMatch", "NoSuchKey", ... ("" when not an S3 error)
  std::string message;
};
S3ErrorBody parse_error_body(const std::string& xml);

// <CompleteMultipartUpload> with one <Part> per (part number, ETag), in the order given.
std::string complete_multipart_body(const std::vector<std::pair<int, std::string>>& parts);

// An ETag as sent ("\"abc\"" or abc) without its quotes.
std::string strip_quotes(const std::string& etag);

}  // namespace remote
}  // namespace dscache
