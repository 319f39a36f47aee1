// Hardware transactions (Intel TSX's RTM), for an engine that runs a short commit phase
// as one transaction (spash's commit phase, paper 002 Sec. IV-A). Chosen at run time:
// nothing here runs unless Usable() said yes, and only these functions are built for rtm.
//
//   const unsigned status = htm::Begin();
//   if (status != htm::kStarted) { ... aborted: every store since Begin undone, and
//                                  execution is back here with the reason ... }
//   ... loads and stores, no flush (clwb aborts every transaction), no system call ...
//   htm::End();  // commits: every store at once
//
// Begin may return in one function and End run in another (a caller's commit phase):
// an abort restores the registers and the memory, the stack included, as they were at
// Begin, so execution resumes inside Begin's frame and Begin returns again.
#pragma once

namespace pmhash::htm {

inline constexpr unsigned kStarted = ~0u;
// Explicit abort codes (AbortRetry, AbortFallback), as ExplicitCode reads them back.
inline constexpr unsigned kRetryCode = 1, kFallbackCode = 2;

// Whether this CPU runs RTM transactions: cpuid reports rtm and a probe transaction
// commits (microcode may disable TSX and leave the flag; then every transaction aborts).
// Cached after the first call.
bool Usable();

unsigned Begin();
void End();
// Abort the running transaction with kRetryCode / kFallbackCode: execution resumes at
// Begin. Outside a transaction they do nothing and return.
void AbortRetry();
void AbortFallback();
// The code of an explicit abort (0: the hardware aborted: a conflict, capacity, ...).
unsigned ExplicitCode(unsigned status);

}  // namespace pmhash::htm
