// stderr as a terminal: its width, and whether a progress line (drawn with '\r', no newline) is
// open on it, so that any other message can end that line first (no torch types).
#pragma once

namespace dscache {
namespace train {

// The width to draw a line of stderr in: $COLUMNS when it is a positive number, else the
// terminal's (TIOCGWINSZ), else 80.
int stderr_columns();

// Process-wide by nature, like the terminal it describes: set by ProgressLine (progress_line.h)
// after it draws a line without ending it; cleared by end_progress_line().
void mark_progress_line_open();
// Ends an open progress line with a newline on stderr, so that the next message starts at the
// beginning of a line; does nothing otherwise. Async-signal-safe (a lock-free atomic and one
// write(2)): the stop-signal handler calls it too.
void end_progress_line();

}  // namespace train
}  // namespace dscache
