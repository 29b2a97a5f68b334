// call_options.h - what a call's dilattn_call_options carry (SPEC 11.2, 10.3, 14.3, 14.11), read and
// checked in one place for dilattn_forward_ex / dilattn_backward_ex (dispatch.cpp) and the
// ring's dilattn_ring_forward_ex / dilattn_ring_backward_ex (lib/ring/).
#ifndef DILATTN_CALL_OPTIONS_H
#define DILATTN_CALL_OPTIONS_H

#include "backend.h"
#include "dilattn.h"
#include "problem.h"

namespace dilattn {

// The seed and offset: a dropout plan (p > 0) needs options, since a call without them would
// draw one fixed mask at every step; the offset is a 32-bit counter word (SPEC 11.1). The sink
// logits: a plan with sinks needs them, and one without refuses them, so that a forgotten
// setting never gives an answer without the sink. `options` may be null (the plain call);
// `entry` names the call for the message; the forward (backward = false) drops d_sinks.
// SUCCESS fills *dropout and *sinks, and *progress where it is not null (SPEC 14.11: the ring,
// which passes null, refuses a callback); else the last error names the argument.
struct ProgressCall {
  dilattn_progress_fn fn = nullptr;
  void* user = nullptr;
};
dilattn_status read_call_options(const Problem& p, const dilattn_call_options* options,
                                 const char* entry, bool backward, DropoutCall* dropout,
                                 SinksCall* sinks, ProgressCall* progress);

}  // namespace dilattn

#endif  // DILATTN_CALL_OPTIONS_H
