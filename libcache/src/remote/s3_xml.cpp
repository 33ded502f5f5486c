// S3 XML documents (s3_xml.h).
#include "remote/s3_xml.h"

#include <cctype>
#include <cstdlib>
#include <stdexcept>

namespace dscache {
namespace remote {

namespace {

// Where the element `tag` starting at or after `from` opens: the '<' position, and its
// content's [begin, end) and the position after its close. nullopt when there is none.
struct Span {
  size_t content_begin, content_end, after;
};

std::optional<Span> find_element(const std::string& xml, const std::string& tag, size_t from) {
  const std::string open = "<" + tag;
  for (size_t p = xml.find(open, from); p != std::string::npos; p = xml.find(open, p + 1)) {
    size_t q = p + open.size();
    if (q >= xml.size()) return std::nullopt;
    char c = xml[q];
    if (c != '>' && c != '/' && !std::isspace(static_cast<unsigned char>(c))) continue;
    size_t gt = xml.find('>', q);
    if (gt == std::string::npos) return std::nullopt;
    if (xml[gt - 1] == '/') return Span{gt + 1, gt + 1, gt + 1};  // <tag/>
    size_t close = xml.find("</" + tag + ">", gt + 1);
    if (close == std::string::npos) return std::nullopt;
    return Span{gt + 1, close, close + tag.size() + 3};
  }
  return std::nullopt;
}

void append_utf8(std::string& out, unsigned long cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// Decodes the entity at text[i] == '&' into `out`; returns the index after it, or i + 1 with
// the '&' kept when it is not a well-formed entity.
size_t decode_entity(const std::string& text, size_t i, std::string& out) {
  size_t semi = text.find(';', i);
  if (semi == std::string::npos || semi - i > 10) {
    out += '&';
    return i + 1;
  }
  std::string name = text.substr(i + 1, semi - i - 1);
  static const std::pair<const char*, char> kNamed[] = {
      {"amp", '&'}, {"lt", '<'}, {"gt", '>'}, {"quot", '"'}, {"apos", '\''}};
  for (const auto& [n, c] : kNamed) {
    if (name == n) {
      out += c;
      return semi + 1;
    }
  }
  if (name.size() >= 2 && name[0] == '#') {
    bool hex = name[1] == 'x' || name[1] == 'X';
    std::string digits = name.substr(hex ? 2 : 1);
    char* end = nullptr;
    unsigned long cp = std::strtoul(digits.c_str(), &end, hex ? 16 : 10);
    if (!digits.empty() && *end == '\0' && cp > 0 && cp <= 0x10FFFF) {
      append_utf8(out, cp);
      return semi + 1;
    }
  }
  out += '&';
  return i + 1;
}

}  // namespace

std::string xml_decode(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    if (text.compare(i, 9, "<![CDATA[") == 0) {
      size_t end = text.find("]]>", i + 9);
      if (end == std::string::npos) end = text.size();
      out += text.substr(i + 9, end - i - 9);
      i = end == text.size() ? end : end + 3;
    } else if (text[i] == '&') {
      i = decode_entity(text, i, out);
    } else {
      out += text[i++];
    }
  }
  return out;
}

std::string xml_escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::vector<std::string> xml_elements(const std::string& xml, const std::string& tag) {
  std::vector<std::string> out;
  size_t from = 0;
  while (auto span = find_element(xml, tag, from)) {
    out.push_back(
        xml_decode(xml.substr(span->content_begin, span->content_end - span->content_begin)));
    from = span->after;
  }
  return out;
}

std::optional<std::string> xml_first_raw(const std::string& xml, const std::string& tag) {
  auto span = find_element(xml, tag, 0);
  if (!span) return std::nullopt;
  return xml.substr(span->content_begin, span->content_end - span->content_begin);
}

std::optional<std::string> xml_first(const std::string& xml, const std::string& tag) {
  auto raw = xml_first_raw(xml, tag);
  if (!raw) return std::nullopt;
  return xml_decode(*raw);
}

std::string strip_quotes(const std::string& etag) {
  if (etag.size() >= 2 && etag.front() == '"' && etag.back() == '"') {
    return etag.substr(1, etag.size() - 2);
  }
  return etag;
}

ListPage parse_list_page(const std::string& xml) {
  if (!xml_first_raw(xml, "ListBucketResult")) {
    throw std::runtime_error("not a ListBucketResult document");
  }
  ListPage page;
  size_t from = 0;
  while (auto span = find_element(xml, "Contents", from)) {
    std::string contents = xml.substr(span->content_begin, span->content_end - span->content_begin);
    from = span->after;
    ListedObject o;
    auto key = xml_first(contents, "Key");
    if (!key) throw std::runtime_error("a Contents element without a Key");
    o.key = *key;
    std::string size = xml_first(contents, "Size").value_or("");
    char* end = nullptr;
    o.size = std::strtoull(size.c_str(), &end, 10);
    if (size.empty() || *end != '\0' || !std::isdigit(static_cast<unsigned char>(size[0]))) {
      throw std::runtime_error("object '" + o.key + "' has Size '" + size + "'");
    }
    o.etag = strip_quotes(xml_first(contents, "ETag").value_or(""));
    page.objects.push_back(std::move(o));
  }
  page.truncated = xml_first(xml, "IsTruncated").value_or("false") == "true";
  page.next_token = xml_first(xml, "NextContinuationToken").value_or("");
  if (page.truncated && page.next_token.empty()) {
    throw std::runtime_error("a truncated page without a NextContinuationToken");
  }
  return page;
}

S3ErrorBody parse_error_body(const std::string& xml) {
  S3ErrorBody e;
  auto error = xml_first_raw(xml, "Error");
  if (!error) return e;
  e.code = xml_first(*error, "Code").value_or("");
  e.message = xml_first(*error, "Message").value_or("");
  return e;
}

std::string complete_multipart_body(const std::vector<std::pair<int, std::string>>& parts) {
  std::string xml = "<CompleteMultipartUpload>";
  for (const auto& [number, etag] : parts) {
    xml += "<Part><PartNumber>" + std::to_string(number) + "</PartNumber><ETag>" +
           xml_escape("\"" + strip_quotes(etag) + "\"") + "</ETag></Part>";
  }
  xml += "</CompleteMultipartUpload>";
  return xml;
}

}  // namespace remote
}  // namespace dscache
