#ifndef CMICROHTTPD_SHIM_H
#define CMICROHTTPD_SHIM_H
#include <stdint.h>
#include <stddef.h>
#include <stdarg.h>
#include <sys/types.h>
#include <sys/socket.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <netinet/tcp.h>

/* MHD_start_daemon is variadic, which Swift cannot call: every option travels
   through one MHD_OPTION_ARRAY, plus the three callbacks whose C types are
   function pointers. */
static inline struct MHD_Daemon *CMicroHTTPD_start(unsigned int flags,
                                                   uint16_t port,
                                                   const struct sockaddr *address,
                                                   MHD_AccessHandlerCallback handler,
                                                   void *handler_cls,
                                                   MHD_RequestCompletedCallback completed,
                                                   void *(*uri_log)(void *, const char *, struct MHD_Connection *),
                                                   void *callbacks_cls,
                                                   struct MHD_OptionItem *options) {
  if (address != NULL) {
    return MHD_start_daemon(flags, port, NULL, NULL, handler, handler_cls,
                            MHD_OPTION_SOCK_ADDR, address,
                            MHD_OPTION_NOTIFY_COMPLETED, completed, callbacks_cls,
                            MHD_OPTION_URI_LOG_CALLBACK, uri_log, callbacks_cls,
                            MHD_OPTION_ARRAY, options,
                            MHD_OPTION_END);
  }
  return MHD_start_daemon(flags, port, NULL, NULL, handler, handler_cls,
                          MHD_OPTION_NOTIFY_COMPLETED, completed, callbacks_cls,
                          MHD_OPTION_URI_LOG_CALLBACK, uri_log, callbacks_cls,
                          MHD_OPTION_ARRAY, options,
                          MHD_OPTION_END);
}

/* MHD_get_daemon_info is variadic and returns a union. */
static inline uint16_t CMicroHTTPD_bound_port(struct MHD_Daemon *daemon) {
  const union MHD_DaemonInfo *info = MHD_get_daemon_info(daemon, MHD_DAEMON_INFO_BIND_PORT);
  return info == NULL ? 0 : info->port;
}

/* The listening socket's descriptor (-1 if none), read without quiescing the daemon. */
static inline int CMicroHTTPD_listen_fd(struct MHD_Daemon *daemon) {
  const union MHD_DaemonInfo *info = MHD_get_daemon_info(daemon, MHD_DAEMON_INFO_LISTEN_FD);
  return info == NULL ? -1 : info->listen_fd;
}

/* MHD_get_connection_info is variadic and returns a union. */
static inline const struct sockaddr *CMicroHTTPD_client_address(struct MHD_Connection *connection) {
  const union MHD_ConnectionInfo *info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
  return info == NULL ? NULL : info->client_addr;
}

/* A client that sent its request and then half-closed (FIN) will send nothing more, but
   libmicrohttpd 0.9.75 under epoll notices only at the connection timeout, leaving the socket
   in CLOSE_WAIT until then. After a completed request: if the peer's side is closed and nothing
   is waiting to be read, shut the socket down, so the next round of the event loop closes the
   connection. Returns 1 when it did. */
static inline int CMicroHTTPD_close_if_peer_finished(struct MHD_Connection *connection) {
  const union MHD_ConnectionInfo *info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
  if (info == NULL) return 0;
  char byte;
  if (recv(info->connect_fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT) == 0) {
    shutdown(info->connect_fd, SHUT_RDWR);
    return 1;
  }
  return 0;
}

/* Holds partial frames back (on) until the response is complete (off): the header and a
   sendfile body leave in full segments, and the client is woken once per response instead of once
   for the header and again for the body. Linux flushes corked data after 200 ms at the latest. */
static inline void CMicroHTTPD_cork(struct MHD_Connection *connection, int on) {
#ifdef TCP_CORK
  const union MHD_ConnectionInfo *info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
  if (info != NULL) (void)setsockopt(info->connect_fd, IPPROTO_TCP, TCP_CORK, &on, sizeof on);
#else
  (void)connection; (void)on;
#endif
}

#endif
