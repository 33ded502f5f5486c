// What the two files that wrap libjpeg (jpeg.cpp decodes, jpeg_encode.cpp encodes) share:
// libjpeg's headers and the error manager that turns its errors *and warnings* into a longjmp
// back to the guarded frame (see jpeg.cpp's file comment).
#pragma once

#include <csetjmp>
#include <cstdio>

// clang-format off
#include <jpeglib.h>  // after <cstdio>: it uses FILE and size_t
#include <jerror.h>   // ERREXIT and the message codes
// clang-format on

namespace dscache {
namespace detail {

// libjpeg's error manager plus where to jump and the formatted message.
struct ErrorMgr {
  jpeg_error_mgr pub;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

[[noreturn]] inline void on_error_exit(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<ErrorMgr*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

// Level -1 is a warning (corrupt data, premature end, extraneous bytes): an error for us.
// Levels >= 0 are trace messages: ignored.
inline void on_emit_message(j_common_ptr cinfo, int msg_level) {
  if (msg_level < 0) on_error_exit(cinfo);
}

inline void init_error_mgr(ErrorMgr* err) {
  jpeg_std_error(&err->pub);
  err->pub.error_exit = on_error_exit;
  err->pub.emit_message = on_emit_message;
  err->message[0] = '\0';
}

}  // namespace detail
}  // namespace dscache
