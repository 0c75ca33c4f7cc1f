/* The plain-C peer of the benchmarks: a libmicrohttpd file server with the origin's MHD options
 * (internal polling thread + epoll + ITC + turbo, a thread pool, the same 8 KiB connection
 * memory, limits and timeout), serving files under ROOT by path from their descriptors (sendfile), with the
 * headers a blob response carries (ETag, Cache-Control, Accept-Ranges, Content-Type,
 * Last-Modified). It answers a GET on the second call of the access handler, as the origin
 * does (queuing on the first makes 0.9.75 close the connection). No access log, no metrics, and
 * none of the origin's own work: one open, fstat, response and close per request (what a plain
 * libmicrohttpd server does), no kept answers, no TCP_CORK.
 *   cc -O2 -o mhd-fileserver mhd-fileserver.c $(pkg-config --cflags --libs libmicrohttpd)
 *   ./mhd-fileserver ROOT PORT THREADS */
#include <microhttpd.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static const char *root;

static enum MHD_Result answer(void *cls, struct MHD_Connection *connection, const char *url, const char *method,
                              const char *version, const char *upload_data, size_t *upload_data_size, void **req_cls) {
    (void)cls; (void)version; (void)upload_data; (void)upload_data_size;
    static int first;
    if (*req_cls == NULL) { *req_cls = &first; return MHD_YES; }
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) return MHD_NO;
    char path[4096];
    if (strstr(url, "..") != NULL || snprintf(path, sizeof path, "%s%s", root, url) >= (int)sizeof path) return MHD_NO;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat info;
    struct MHD_Response *response;
    unsigned int status = MHD_HTTP_OK;
    if (fd < 0 || fstat(fd, &info) != 0) {
        if (fd >= 0) close(fd);
        static const char missing[] = "{\"error\":{\"code\":\"not_found\"}}\n";
        response = MHD_create_response_from_buffer(sizeof missing - 1, (void *)missing, MHD_RESPMEM_PERSISTENT);
        status = MHD_HTTP_NOT_FOUND;
    } else {
        /* The response owns the descriptor from here on. */
        response = MHD_create_response_from_fd64((uint64_t)info.st_size, fd);
        if (response == NULL) { close(fd); return MHD_NO; }
        const char *name = strrchr(url, '/') ? strrchr(url, '/') + 1 : url;
        char etag[160], modified[64];
        snprintf(etag, sizeof etag, "\"%s\"", name);
        struct tm parts;
        gmtime_r(&info.st_mtime, &parts);
        strftime(modified, sizeof modified, "%a, %d %b %Y %H:%M:%S GMT", &parts);
        MHD_add_response_header(response, "ETag", etag);
        MHD_add_response_header(response, "Cache-Control", "public, max-age=31536000, immutable");
        MHD_add_response_header(response, "Last-Modified", modified);
        MHD_add_response_header(response, "Accept-Ranges", "bytes");
        MHD_add_response_header(response, "Content-Type", "application/octet-stream");
    }
    enum MHD_Result result = MHD_queue_response(connection, status, response);
    MHD_destroy_response(response);
    return result;
}

int main(int argc, char **argv) {
    if (argc != 4) { fprintf(stderr, "usage: %s ROOT PORT THREADS\n", argv[0]); return 2; }
    root = argv[1];
    struct MHD_Daemon *daemon = MHD_start_daemon(
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_USE_ITC | MHD_USE_TURBO, (uint16_t)atoi(argv[2]), NULL, NULL, answer, NULL,
        MHD_OPTION_THREAD_POOL_SIZE, (unsigned int)atoi(argv[3]), MHD_OPTION_CONNECTION_LIMIT, (unsigned int)1024,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)30, MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(8 << 10),
        MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned int)0, MHD_OPTION_END);
    if (daemon == NULL) { fprintf(stderr, "cannot listen on port %s\n", argv[2]); return 1; }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(daemon, MHD_DAEMON_INFO_BIND_PORT);
    printf("listening on %u\n", info ? info->port : 0);
    fflush(stdout);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigprocmask(SIG_BLOCK, &set, NULL);
    int signal_number;
    sigwait(&set, &signal_number);
    MHD_stop_daemon(daemon);
    return 0;
}
