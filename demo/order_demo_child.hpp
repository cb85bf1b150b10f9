// The order demo's child process (`fusee demo --child`). It reads what the
// parent already knows from stdin ("started ID", "signalled ID",
// "finished ID", one a line), opens the engine on options.dir (which replays
// every run an earlier life left unfinished), follows the progress stream of
// every unfinished order from its earliest chunk (one thread per stream),
// reads again the result of every order finished earlier, starts the allowed
// orders whose start was never acknowledged, 10 ms apart, signals the
// approval desk's decision once an order awaits it (with a deduplication id,
// so a repeat after a kill counts once), and reports every event on fd 3
// (order_events.hpp).
//
// An ordinary life never ends by itself: the parent SIGKILLs it. The final
// life (options.final) waits until every order finished, shuts the engine
// down, reopens it, re-reads every stream, result and run, reports them and
// exits 0.
#pragma once

#include "demo/order_demo.hpp"

namespace fusee::cli {

// The child's exit code: 0 after the final check, 3 when the engine did not
// open, 4 when a start failed, 5 when the parent went away.
int run_order_demo_child(const OrderDemoOptions& options);

}  // namespace fusee::cli
