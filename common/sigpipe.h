// SIGPIPE: a write to a socket or pipe whose reader is gone raises it, and its default action
// ends the process without a word (status 141). A daemon must survive any peer that closes
// early (a scraper, a stranger's half-open TLS connection, a parent gone), so every write in
// deepool reports EPIPE as an error instead.
//   IgnoreSigpipe: every daemon's main() calls it first thing. SIG_IGN survives exec; children
//     started through common/subprocess.h get the default action back.
//   BlockSigpipeOnThisThread: for a library thread that writes to sockets (the HTTP endpoint),
//     so it never relies on main(): a SIGPIPE raised by a write is directed at the writing
//     thread, so blocking it there makes the write just fail with EPIPE, whatever the process's
//     disposition. A blocked SIGPIPE stays pending on that thread, harmlessly, until it ends.
// Threading: IgnoreSigpipe affects the whole process (call it before threads start);
// BlockSigpipeOnThisThread only the calling thread.
#pragma once

namespace deepool {

void IgnoreSigpipe();
void BlockSigpipeOnThisThread();

}  // namespace deepool
