/*
 * examples.c — the scenarios built into `sluice sim --example NAME`.
 *
 * Each one shows one behaviour people choose (or avoid) a limiter for, in
 * as few lines as it takes; docs/algorithms.md is generated from them, and
 * tests/golden/ holds their output. `sluice sim --example NAME --print`
 * prints one as a starting point for a scenario of your own.
 */
#include "sim.h"

const sim_example sim_examples[] = {
    {"boundary-burst",
     "fixed window lets 2x the limit through across a boundary",
     "# 100 requests just before a minute boundary and 100 right after it, "
     "against 100 per minute.\n"
     "# The fixed window starts afresh at 1m and lets all 200 through in "
     "100 ms; the sliding\n"
     "# window and the sliding log still count the first 100 and deny the "
     "rest.\n"
     "policy fixed    fixed_window:100/m\n"
     "policy sliding  sliding_window:100/m\n"
     "policy log      sliding_log:100/m\n"
     "at 59.9s\n"
     "burst 100\n"
     "at 1m\n"
     "burst 100\n"},

    {"idle-burst", "a token bucket banks unused capacity and spends it at once",
     "# A client sends a request every 2 s, idles for half a minute, then "
     "sends 30 at once and\n"
     "# one a second after that, against 1 per second. A token bucket with "
     "burst=20 has banked\n"
     "# 20 tokens and lets 20 through in one instant (max_in_window 20), then "
     "one a second;\n"
     "# gcra decides exactly the same with one timestamp of state; without a "
     "burst, the\n"
     "# bucket holds a single token.\n"
     "policy bucket  token_bucket:1/s:burst=20\n"
     "policy gcra    gcra:1/s:burst=20\n"
     "policy strict  token_bucket:1/s\n"
     "every 2s for 10s\n"
     "at 40s\n"
     "burst 30\n"
     "every 1s for 10s\n"},

    {"smoothing", "a leaky bucket delays requests instead of rejecting them",
     "# A burst of 20 requests, then 4 per second for 4 s, against 2 per "
     "second.\n"
     "# The leaky bucket queues them and lets them out 500 ms apart (see "
     "delay): nothing is\n"
     "# lost until its queue of 20 is full. A token bucket makes the same "
     "allow/deny decisions\n"
     "# but passes the burst through at once; a sliding window allows 2 and "
     "rejects the rest.\n"
     "policy leaky   leaky_bucket:2/s:burst=20\n"
     "policy bucket  token_bucket:2/s:burst=20\n"
     "policy window  sliding_window:2/s\n"
     "at 1s\n"
     "burst 20\n"
     "at 5s\n"
     "every 250ms for 4s\n"},

    {"retry-storm",
     "clients retrying at once vs honouring retry_after with jitter",
     "# 40 clients call an API limited to 10 per second at the same moment, "
     "twice.\n"
     "# At 0 s a denied client tries again every 10 ms; at 20 s it waits the "
     "retry_after the\n"
     "# limiter reported plus up to 1 s of random jitter. Both waves get the "
     "same service;\n"
     "# compare the attempts it takes (the lines under the timeline).\n"
     "policy gcra   gcra:10/s\n"
     "policy fixed  fixed_window:10/s\n"
     "retry immediate every 10ms max 1000\n"
     "burst 40 api\n"
     "at 20s\n"
     "retry after jitter 1s max 1000\n"
     "burst 40 api\n"},

    {"thundering-herd",
     "clients retrying in lockstep vs exponential backoff with full jitter",
     "# 40 clients call an API limited to 10 per second at the same moment, "
     "twice.\n"
     "# At 0 s every denied client comes back exactly when retry_after says: "
     "the herd returns\n"
     "# together, a spike every 100 ms of which one request passes. At 30 s "
     "they back off with\n"
     "# full jitter after retry_after (uniform in [0, min(4 s, 250 ms x "
     "2^attempt)], sluice's\n"
     "# sl_backoff_delay): the retries spread out, far fewer attempts are "
     "wasted.\n"
     "policy gcra   gcra:10/s\n"
     "retry after max 1000\n"
     "burst 40 api\n"
     "at 30s\n"
     "retry full-jitter 250ms 4s max 1000\n"
     "burst 40 api\n"},

    {"fleet-quiz",
     "10 nodes counting on their own let 20x the limit through",
     "# The quiz: 10 daemons behind a round-robin load balancer enforce 100 "
     "per minute,\n"
     "# each counting on its own. A client sends 1000 requests just before a "
     "minute boundary\n"
     "# and 1000 right after it: how many get through? Every node lets 100 "
     "through per\n"
     "# window, twice: 2000 in 100 ms. With 'store exact' (one shared count) "
     "the fixed window\n"
     "# lets 200 through and the sliding window 100.\n"
     "fleet 10 lb round-robin store local\n"
     "policy fixed    fixed_window:100/m\n"
     "policy sliding  sliding_window:100/m\n"
     "at 59.9s\n"
     "burst 1000\n"
     "at 1m\n"
     "burst 1000\n"},

    {"store-down",
     "the shared store fails: on_store_error decides",
     "# 4 daemons share one exact count in the store: 10 per second, and "
     "the client sends 20.\n"
     "# At 2 s the store goes down; with on_store_error allow every request "
     "passes, uncounted\n"
     "# (fail open), until it is back at 4 s. deny fails closed; local falls "
     "back to each\n"
     "# node's own count (4 nodes: up to 4x the limit).\n"
     "fleet 4 lb round-robin store exact on_store_error allow\n"
     "policy gcra  gcra:10/s\n"
     "every 50ms for 6s\n"
     "at 2s\n"
     "store down\n"
     "at 4s\n"
     "store up\n"},

    {"shedding",
     "an overload shed by priority: critical kept whole, sheddable cut",
     "# A service that can take 100 requests per second gets 20 per second "
     "of critical writes,\n"
     "# 20 of default reads and 100 of sheddable analytics: 140 in all. The "
     "shedder lets\n"
     "# sheddable traffic fill fleet usage up to 60%, default up to 90%, "
     "and never sheds\n"
     "# critical: the analytics absorb the whole cut, every write and read "
     "is served.\n"
     "shedder 100/s critical:never default:90% sheddable:60%\n"
     "policy api  gcra:1000/s\n"
     "class critical\n"
     "every 50ms for 3s writes\n"
     "class default\n"
     "every 50ms for 3s reads\n"
     "class sheddable\n"
     "every 10ms for 3s analytics\n"},
};

const size_t sim_nexamples = sizeof sim_examples / sizeof sim_examples[0];
