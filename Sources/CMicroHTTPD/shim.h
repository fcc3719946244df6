// libmicrohttpd for the HTTP module, the only Swift module that includes it.
// Swift cannot call C variadic functions, so each variadic entry point used gets a plain wrapper.
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/socket.h>
#include <microhttpd.h>

/// Where libmicrohttpd's messages go: `line` (a Swift @convention(c) function) with `context`,
/// one formatted message at a time. Must outlive the daemon.
struct findmy_mhd_logger {
    void (*line)(void *context, const char *text);
    void *context;
};

/// MHD's logger takes a printf format and a va_list, which Swift cannot format; this formats the
/// message (cut at 1 KiB) and hands the text on.
static inline void findmy_mhd_log(void *logger, const char *format, va_list arguments) {
    char text[1024];
    vsnprintf(text, sizeof text, format, arguments);
    const struct findmy_mhd_logger *target = (const struct findmy_mhd_logger *)logger;
    target->line(target->context, text);
}

/// MHD_start_daemon on a listening socket the caller created (so bind errors are the caller's
/// to report precisely), with `thread_pool_size` event-loop threads (1: one internal thread).
/// MHD owns `listen_fd` from here until MHD_quiesce_daemon hands it back. The logger is the
/// first option, as MHD asks, so that no message of the start goes to standard error.
static inline struct MHD_Daemon *findmy_mhd_start(
    unsigned int flags, int listen_fd, unsigned int connections_max,
    unsigned int connections_per_address_max, size_t memory_bytes_max,
    unsigned int timeout_seconds, unsigned int thread_pool_size, MHD_AccessHandlerCallback access,
    void *context, MHD_RequestCompletedCallback completed,
    MHD_NotifyConnectionCallback notify_connection,
    void *(*uri_log)(void *context, const char *uri, struct MHD_Connection *connection),
    struct findmy_mhd_logger *logger) {
    return MHD_start_daemon(
        flags, 0, NULL, NULL, access, context,
        MHD_OPTION_EXTERNAL_LOGGER, findmy_mhd_log, logger,
        MHD_OPTION_THREAD_POOL_SIZE, thread_pool_size,
        MHD_OPTION_PER_IP_CONNECTION_LIMIT, connections_per_address_max,
        MHD_OPTION_LISTEN_SOCKET, (MHD_socket)listen_fd,
        MHD_OPTION_CONNECTION_LIMIT, connections_max,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, memory_bytes_max,
        MHD_OPTION_CONNECTION_TIMEOUT, timeout_seconds,
        MHD_OPTION_NOTIFY_COMPLETED, completed, context,
        MHD_OPTION_NOTIFY_CONNECTION, notify_connection, context,
        MHD_OPTION_URI_LOG_CALLBACK, uri_log, context,
        MHD_OPTION_END);
}

/// The port MHD is listening on (0 for a unix socket).
static inline uint16_t findmy_mhd_bound_port(struct MHD_Daemon *daemon) {
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(daemon, MHD_DAEMON_INFO_BIND_PORT);
    return info == NULL ? 0 : info->port;
}

/// The pointer the connection-notify callback stored for this connection.
static inline void *findmy_mhd_socket_context(struct MHD_Connection *connection) {
    const union MHD_ConnectionInfo *info =
        MHD_get_connection_info(connection, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return info == NULL ? NULL : info->socket_context;
}

/// The peer address; NULL when MHD does not know it.
static inline const struct sockaddr *findmy_mhd_client_address(struct MHD_Connection *connection) {
    const union MHD_ConnectionInfo *info =
        MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    return info == NULL ? NULL : info->client_addr;
}

/// The connection's socket; -1 when MHD does not say.
static inline int findmy_mhd_connection_fd(struct MHD_Connection *connection) {
    const union MHD_ConnectionInfo *info =
        MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
    return info == NULL ? -1 : (int)info->connect_fd;
}
