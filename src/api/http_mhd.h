/* http_mhd.h - the HTTP server: libmicrohttpd, one thread per connection
 * (so a followed log or a generation may block its own thread without
 * stalling others), a bounded number of connections, idle timeouts, and
 * body caps (413): a body over its cap is never kept; it is read and
 * dropped (up to 64 MiB more) so the client hears the 413, and a declared
 * length beyond that, or one whose client waits for "100 Continue", is
 * refused before reading.
 *
 * Connections still waiting for their request's headers are bounded by
 * api/conn_guard.h: at most 3/4 of the connections (the rest is a reserve
 * for callers whose key or token was checked), each for at most
 * --header-timeout seconds however its bytes trickle. A request with a
 * body is admitted at its headers (api_admit_body) or refused without
 * holding a connection busy. Two Content-Lengths that differ, or one with
 * Transfer-Encoding, are a 400 and the connection closes.
 */
#ifndef ALALLO_API_HTTP_MHD_H
#define ALALLO_API_HTTP_MHD_H

#include <stddef.h>

#include "api/server.h"

#define HTTP_CONNECTIONS_MAX 1024
#define HTTP_IDLE_TIMEOUT_S 60

struct http_server;

/* Listens on host:port (port 0: any free port) and serves srv. Returns 0,
 * or -1 with a one-line reason in err. */
int http_server_start(struct api_server *srv, const char *host, int port,
                      struct http_server **out /* OUT */, char *err, size_t errcap);

/* The port it listens on. */
int http_server_port(const struct http_server *h);

/* Stops accepting, ends open connections and frees h. NULL is fine. */
void http_server_stop(struct http_server *h);

/* Percent-decodes the NUL-terminated s in place, as the server decodes a
 * request's path and each query key and value (libmicrohttpd has already
 * turned a query's '+' into a space; a path's '+' stays). "%XY" with two
 * hex digits becomes that byte; a '%' not followed by two hex digits stays
 * as it is. "%00" is kept as the three characters it is, never a NUL: a
 * decoded NUL would cut the string short and make a different route
 * answer (the server refuses a path holding "%00" with a 400). The result
 * is never longer than s. Returns its length (strlen(s) afterwards). */
size_t http_percent_decode(char *s /* IN/OUT */);

#endif
