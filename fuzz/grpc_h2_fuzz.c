/*
 * grpc_h2_fuzz.c — libFuzzer harness for the gRPC front end's transport
 * (src/server/grpc_conn.c, grpc_server.c): the input is what a client of
 * --grpc sends on one connection after HTTP/2's preface (which the
 * harness sends first), fed to the connection's real nghttp2 session and
 * callbacks (headers and their bounds, message framing, grpc-timeout, the
 * calls decoded, decided by a memory-mode engine on this thread and
 * answered) through grpc_conn_memory: no socket, no event loop running,
 * what the server would send made and dropped.
 *
 * The input is fed in two reads, split where its first byte says, so
 * that frames cut across reads are covered too. Properties beyond "no
 * crash, no leak, no sanitizer report": once the connection is closed,
 * the request bytes it held are all given back (the daemon's gRPC budget
 * is 0 again) and it is uncounted.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rules/config.h"
#include "server/grpc_conn.h"
#include "server/grpc_server.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char yaml[] =
    "domain: default\n"
    "descriptors:\n"
    "  - key: key\n"
    "    rate_limit: {unit: minute, requests_per_unit: 5}\n"
    "  - key: key\n"
    "    value: blocked\n"
    "    rate_limit: {unit: second, requests_per_unit: 0}\n";

static server srv;
static worker w;

/* One server and worker as the daemon's, small bounds so that inputs
   reach them: 8 streams, 1 KiB of headers, a 256-byte message, 4 KiB of
   request bytes held by all connections. */
static void setup(void) {
  cfg_errors ce = {0};
  sl_config *c = config_load_string(yaml, sizeof yaml - 1, "f.yaml", &ce);
  if (!c) abort();
  engine_opts eo = {0};
  char err[256];
  if (!(srv.eng = engine_new(&eo, c, err, sizeof err))) abort();
  srv.o.grpc_max_streams = 8;
  srv.o.max_header_bytes = 1024;
  srv.o.max_body = 256;
  srv.o.max_input_buffer = 4096;
  srv.o.max_key = 64;
  srv.o.header_style = HDR_IETF | HDR_X;
  w.srv = &srv;
  if (!(w.loop = h2o_evloop_create()) || !(w.et = engine_thread_new(srv.eng)))
    abort();
  grpc_worker_start(&w);
  if (!w.grpc) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const uint8_t preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
  if (!w.grpc) setup();
  size_t cut = size ? data[0] % (size + 1) : 0;
  /* Exact-size copies: a read past either end is an ASan report. */
  uint8_t *a = malloc(cut ? cut : 1), *b = malloc(size - cut ? size - cut : 1);
  if (!a || !b) abort();
  memcpy(a, data, cut);
  memcpy(b, data + cut, size - cut);
  grpc_conn *c = grpc_conn_memory(&w);
  if (!c) abort();
  if (grpc_conn_input(c, preface, sizeof preface - 1) ||
      (cut && grpc_conn_input(c, a, cut)) ||
      (size - cut && grpc_conn_input(c, b, size - cut)))
    c = NULL; /* ended, freed */
  if (c) grpc_conn_drop(c);
  if (atomic_load(&srv.grpc_buffered) != 0 || w.grpc_conns != 0 ||
      atomic_load(&srv.connections) != 0 || atomic_load(&srv.grpc_open) != 0)
    abort();
  free(a);
  free(b);
  engine_thread_quiesce(w.et);
  return 0;
}
